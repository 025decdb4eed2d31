package http1

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// response is the fast path's http.ResponseWriter. It keeps the body, and
// writes the status line, the header fields and the body in one write once
// the handler returns, framed by Content-Length, with net/http's rules:
// Date added unless set, Content-Type sniffed when missing (unless the body
// is encoded), no body, Content-Length or Transfer-Encoding on 1xx, 204 and
// 304 (nor Content-Type on 304). It answers no informational status (1xx);
// the fast path's handlers send none.
type response struct {
	conn   *conn
	req    *http.Request
	header http.Header
	status int
	body   []byte
}

func (w *response) reset(req *http.Request) {
	w.req = req
	clear(w.header)
	w.status = 0
	w.body = w.body[:0]
}

// An idle connection keeps no buffer larger than keepIdle: a client that
// leaves its connections idle after a large page (a list of 1,000 long
// names: 330 KB) would have each hold the page twice, the body and the
// answer, for up to --idle-timeout, against the few KiB the limits count
// on a connection (docs/limits.md). Once an answer is written, its larger
// buffers go to a pool that the busy connections share; buffers larger
// than maxPooled, of rare answers, to the collector.
const (
	keepIdle  = 4 << 10
	maxPooled = 64 << 10
)

var answerBuffers sync.Pool // of *[]byte, keepIdle < cap <= maxPooled

// bufferFor returns an empty buffer with room for n bytes at least: a
// pooled one when it is large enough.
func bufferFor(n int) []byte {
	if bp, ok := answerBuffers.Get().(*[]byte); ok {
		if cap(*bp) >= n {
			return (*bp)[:0]
		}
		answerBuffers.Put(bp)
	}
	return make([]byte, 0, max(n, 2*keepIdle))
}

// release gives b to the pool, or the collector, when it is too large to
// keep idle; it returns what the connection keeps (b, or nil).
func release(b []byte) []byte {
	switch c := cap(b); {
	case c <= keepIdle:
		return b[:0]
	case c <= maxPooled:
		b = b[:0]
		answerBuffers.Put(&b)
	}
	return nil
}

// grow makes room for n more bytes in the body, from the pool once the
// body outgrows what a connection keeps.
func (w *response) grow(n int) {
	if need := len(w.body) + n; need > cap(w.body) && need > keepIdle {
		body := append(bufferFor(need), w.body...)
		release(w.body)
		w.body = body
	}
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http
	}
	if w.status != 0 || code < 200 {
		return
	}
	w.status = code
}

func (w *response) Write(p []byte) (int, error) {
	if err := w.startBody(); err != nil {
		return 0, err
	}
	w.grow(len(p))
	w.body = append(w.body, p...)
	return len(p), nil
}

func (w *response) WriteString(s string) (int, error) {
	if err := w.startBody(); err != nil {
		return 0, err
	}
	w.grow(len(s))
	w.body = append(w.body, s...)
	return len(s), nil
}

// startBody is the status check before any body: 200 unless one was set,
// and no body where the status allows none.
func (w *response) startBody() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return http.ErrBodyNotAllowed
	}
	return nil
}

// SetReadDeadline and SetWriteDeadline serve http.ResponseController.
func (w *response) SetReadDeadline(t time.Time) error {
	w.conn.read.at = t
	return w.conn.c.SetReadDeadline(t)
}

func (w *response) SetWriteDeadline(t time.Time) error {
	w.conn.write.at = t
	return w.conn.c.SetWriteDeadline(t)
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// appendAnswer appends the whole answer to dst; keep false says the
// connection closes after it.
func (w *response) appendAnswer(dst []byte, keep bool) []byte {
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	dst = append(dst, "HTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	dst = append(dst, ' ')
	if text := http.StatusText(status); text != "" {
		dst = append(dst, text...)
	} else {
		dst = append(dst, "status code "...)
		dst = strconv.AppendInt(dst, int64(status), 10)
	}
	dst = append(dst, "\r\n"...)
	withBody := bodyAllowed(status)
	// In name order, as net/http writes them: an answer reads the same
	// every time.
	var names [16]string
	sorted := names[:0]
	for name := range w.header {
		sorted = append(sorted, name)
	}
	slices.Sort(sorted)
	for _, name := range sorted {
		values := w.header[name]
		switch name {
		case "Content-Length", "Transfer-Encoding", "Connection":
			continue // the fast path's to say
		case "Content-Type":
			if status == http.StatusNotModified {
				continue
			}
		}
		if !allIn(name, &tokenChars) {
			continue // as net/http: a field it could not send is dropped
		}
		for _, v := range values {
			dst = appendField(dst, name, v)
		}
	}
	if withBody {
		if _, typed := w.header["Content-Type"]; !typed && w.header.Get("Content-Encoding") == "" && len(w.body) > 0 {
			dst = appendField(dst, "Content-Type", http.DetectContentType(w.body))
		}
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, int64(len(w.body)), 10)
		dst = append(dst, "\r\n"...)
	}
	if _, dated := w.header["Date"]; !dated {
		dst = append(dst, "Date: "...)
		dst = AppendDate(dst)
		dst = append(dst, "\r\n"...)
	}
	if !keep {
		dst = append(dst, "Connection: close\r\n"...)
	}
	dst = append(dst, "\r\n"...)
	if withBody {
		dst = append(dst, w.body...)
	}
	return dst
}

// appendField appends "name: value" and CRLF, a line break in the value
// sent as a space, as net/http does.
func appendField(dst []byte, name, value string) []byte {
	dst = append(dst, name...)
	dst = append(dst, ": "...)
	if strings.ContainsAny(value, "\r\n") {
		value = lineBreaksToSpaces.Replace(value)
	}
	dst = append(dst, strings.TrimSpace(value)...)
	return append(dst, "\r\n"...)
}

var lineBreaksToSpaces = strings.NewReplacer("\r", " ", "\n", " ")

// The Date field changes once a second; it is formatted once a second.
type formattedDate struct {
	second int64
	text   []byte
}

var lastDate atomic.Pointer[formattedDate]

// AppendDate appends the Date field's value for now (RFC 9110, section
// 6.6.1), formatted once a second for every answer that needs it.
func AppendDate(dst []byte) []byte {
	now := time.Now()
	if d := lastDate.Load(); d != nil && d.second == now.Unix() {
		return append(dst, d.text...)
	}
	d := &formattedDate{second: now.Unix(), text: now.UTC().AppendFormat(nil, http.TimeFormat)}
	lastDate.Store(d)
	return append(dst, d.text...)
}
