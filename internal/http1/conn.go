package http1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"
)

// conn is one connection the fast path serves, until it ends or is
// handed off.
type conn struct {
	srv    *Server
	c      net.Conn
	remote string
	br     *bufio.Reader
	idle   atomic.Bool // waiting for a request: Shutdown may close it
	// phase is where the connection is in a request: between requests,
	// reading a head, or serving (a handler runs and its answer is
	// written: what a Shutdown out of time reports). A head still coming
	// in is no request yet: Shutdown takes it from phaseHead to
	// phaseCut and wakes its read, and the connection closes, unless it
	// has already moved on to phaseServing. One compare-and-swap on
	// either side decides which.
	phase atomic.Int32
	// headDeadline is when the head being read must be in (zero: never).
	headDeadline time.Time
	// read and write are the connection's deadlines as last set.
	read, write deadline
	out         []byte // the answer being assembled, kept between requests
	w           response
	body        body
	parsed      parsedRequest // the request being served, reused as w is
}

func newConn(s *Server, c net.Conn) *conn {
	cc := &conn{srv: s, c: c, remote: c.RemoteAddr().String(),
		read: deadline{set: c.SetReadDeadline}, write: deadline{set: c.SetWriteDeadline}}
	cc.w.conn = cc
	cc.w.header = http.Header{}
	return cc
}

const (
	phaseBetween int32 = iota
	phaseHead
	phaseServing
	phaseCut // by Shutdown, while its head was coming in
)

// cutIfReadingHead closes, by waking its read, a connection whose head is
// still coming in, and reports whether it did.
func (c *conn) cutIfReadingHead() bool {
	if !c.phase.CompareAndSwap(phaseHead, phaseCut) {
		return false
	}
	c.c.SetReadDeadline(longAgo)
	return true
}

// longAgo is a deadline in the past, which wakes a blocked read.
var longAgo = time.Unix(1, 0)

func (c *conn) wakeIfIdle() {
	if c.idle.Load() {
		c.c.SetReadDeadline(longAgo)
	}
}

func (c *conn) serve() {
	handedOff := false
	defer func() {
		if c.br != nil {
			c.br.Reset(nil)
			readers.Put(c.br)
		}
		if !handedOff {
			c.c.Close()
		}
		c.srv.untrack(c)
	}()
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(c.c)
	lim := c.srv.limits
	first, lastPost := true, false
	for {
		// Wait for a request's first byte: a first request's head has
		// ReadHeaderTimeout from the accept, a later one IdleTimeout.
		c.idle.Store(true)
		if first {
			c.headDeadline = after(time.Now(), lim.ReadHeaderTimeout)
			c.read.setAt(c.headDeadline)
		} else {
			c.read.renew(time.Now(), lim.IdleTimeout)
		}
		// Checked after the deadline is set: a Shutdown that began before
		// is seen here, one that begins after sees idle and sets a
		// deadline in the past, which this one cannot overwrite.
		if c.srv.closing.Load() {
			return
		}
		// Between requests net/http waits for four bytes, and closes
		// without an answer when fewer come; so does this.
		wait := 4
		if first {
			wait = 1
		}
		if _, err := c.br.Peek(wait); err != nil {
			return
		}
		// In that order: a Shutdown in between sees idle and wakes the
		// read, or sees the head phase and cuts it.
		c.phase.Store(phaseHead)
		c.idle.Store(false)
		if first {
			if b, _ := c.br.Peek(1); b[0] == tlsHandshake {
				c.refuseTLS()
				return
			}
		}
		if lastPost {
			// As net/http, after a POST: up to four CR or LF before the
			// next request are dropped (RFC 7230, section 3.5), whichever
			// server reads it.
			peek, _ := c.br.Peek(4)
			c.br.Discard(leadingCRorLF(peek))
		}
		started := time.Now()
		if !first {
			// Set only if the head is not all in already (readHead).
			c.headDeadline = after(started, lim.ReadHeaderTimeout)
		}
		first = false
		head, ok := c.readHead()
		if !ok || !c.phase.CompareAndSwap(phaseHead, phaseServing) {
			return // cut by Shutdown: this request is not served
		}
		req, take := parseRequest(head, c.srv.take, &c.parsed)
		if !take {
			handedOff = c.handOff(head == nil)
			return
		}
		c.br.Discard(len(head))
		lastPost = req.Method == http.MethodPost
		keep := c.serveRequest(req, started)
		c.phase.Store(phaseBetween)
		if !keep {
			return
		}
	}
}

// tlsHandshake begins a TLS record of a handshake (RFC 8446, section
// 5.1), which no HTTP/1 request does: its first byte is a method's.
const tlsHandshake = 0x16

// refuseTLS answers a TLS client on this plain HTTP port at once, which
// then reports the mistake ("wrong version number"), instead of waiting
// out ReadHeaderTimeout for a head that never comes: with the server's
// Reject, which the app sets to log and count it as its other refusals;
// without, a bare answer, its Date (as in every other answer: RFC 9110,
// section 6.6.1) why it is composed each time.
func (c *conn) refuseTLS() {
	const message = "this port speaks plain HTTP, not TLS: use an http:// URL"
	var answer []byte
	if c.srv.Reject != nil {
		answer = c.srv.Reject(c.c.RemoteAddr(), http.StatusBadRequest, message)
	} else {
		const body = `{"error":400,"message":"` + message + `"}`
		answer = fmt.Appendf(nil, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\nDate: ", len(body))
		answer = append(AppendDate(answer), "\r\n\r\n"+body...)
	}
	c.c.SetWriteDeadline(time.Now().Add(time.Second))
	c.c.Write(answer)
}

// readHead returns the buffered head of the next request, through the
// empty line that ends it, without consuming it. It returns nil, and true,
// when the head does not fit in the buffer or the client stopped sending
// in the middle of it (net/http will read it and answer), and false when
// the wait for it timed out (net/http, too, just closes then). An empty
// line after a bare LF ends a head too, for net/http to answer.
func (c *conn) readHead() ([]byte, bool) {
	searched := 0
	for {
		n := c.br.Buffered()
		buf, _ := c.br.Peek(n)
		if end := headEnd(buf, max(0, searched-3)); end > 0 {
			return buf[:end], true
		}
		searched = n
		if n == bufferSize {
			return nil, true
		}
		c.read.setAt(c.headDeadline)
		if _, err := c.br.Peek(n + 1); err != nil {
			return nil, !isTimeout(err)
		}
	}
}

// headEnd returns the length of the head in buf, through its first empty
// line ("\n\r\n" or "\n\n"), looking from index from; 0 when there is none.
func headEnd(buf []byte, from int) int {
	for i := from; i < len(buf); i++ {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return 0
		}
		i += j
		switch {
		case i+1 < len(buf) && buf[i+1] == '\n':
			return i + 2
		case i+2 < len(buf) && buf[i+1] == '\r' && buf[i+2] == '\n':
			return i + 3
		}
	}
	return 0
}

var crlfcrlf = []byte("\r\n\r\n")

// handOff gives the connection, and what was read of it, to net/http.
// partial says its head is still coming in (it is longer than the
// buffer): Shutdown may then cut it, as it cuts a head the fast path
// reads (replayConn).
func (c *conn) handOff(partial bool) bool {
	pending, _ := c.br.Peek(c.br.Buffered())
	rc := &replayConn{Conn: c.c, pending: bytes.Clone(pending), headDeadline: c.headDeadline}
	if partial {
		// Set before Shutdown can see it.
		rc.srv = c.srv
		rc.phase.Store(phaseHead)
		if n := len(pending); n >= 2 {
			rc.last = [2]byte{pending[n-2], pending[n-1]}
		}
		if !c.srv.trackPartial(rc) {
			rc.srv = nil
		}
	}
	// net/http sets its own deadlines; clear ours.
	c.c.SetDeadline(time.Time{})
	c.read.at, c.write.at = time.Time{}, time.Time{}
	return c.srv.handoffs.give(rc)
}

// maxDiscard is how much of a body its handler left unread is read and
// dropped so the connection can serve another request, as net/http does;
// with more left, the connection closes after the answer.
const maxDiscard = 256 << 10

// serveRequest answers one request, and reports whether the connection
// may serve another.
func (c *conn) serveRequest(req *http.Request, started time.Time) bool {
	lim := c.srv.limits
	c.body = body{br: c.br, remaining: req.ContentLength}
	if req.ContentLength > 0 {
		// A body all in the buffer needs no more reads, nor a deadline.
		if lim.ReadTimeout > 0 && !c.body.InBuffer() {
			c.read.setAt(started.Add(lim.ReadTimeout))
		}
		req.Body = &c.body
	} else {
		req.Body = http.NoBody
	}
	c.write.renew(started, lim.WriteTimeout)
	req.RemoteAddr = c.remote
	w := &c.w
	w.reset(req)
	if !c.callHandler(w, req) {
		return false
	}
	keep := !req.Close && !c.srv.closing.Load()
	unread := c.body.remaining > 0
	if unread {
		switch {
		case c.body.remaining > maxDiscard:
			keep = false
		case w.status >= 400 && !c.body.InBuffer():
			// A refusal (a 401, a 429) of a body not all in yet: sent
			// at once, and the connection closed after it, rather than
			// both waiting up to ReadTimeout for a body a client may
			// send slowly, unauthenticated, to hold connections.
			keep = false
		default:
			if _, err := io.CopyN(io.Discard, &c.body, c.body.remaining); err != nil {
				keep = false
			}
		}
	}
	if len(w.header["Connection"]) > 0 {
		keep = keep && !hasToken(w.header["Connection"], "close")
	}
	if need := len(w.body) + 1024; need > cap(c.out) && need > keepIdle {
		release(c.out)
		c.out = bufferFor(need)
	}
	c.out = w.appendAnswer(c.out[:0], keep)
	_, err := c.c.Write(c.out)
	// Before the connection waits for its next request, perhaps long.
	c.out, w.body = release(c.out), release(w.body)
	if err != nil {
		return false
	}
	if !keep && unread && c.body.remaining > 0 {
		c.closeWriteAndWait()
	}
	return keep
}

// callHandler runs the handler, and reports false when it panicked: the
// answer is then cut short, and the connection closed, as net/http does
// (logging the panic unless it is http.ErrAbortHandler).
func (c *conn) callHandler(w *response, req *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if v != http.ErrAbortHandler {
				c.srv.log.Error("panic serving "+c.remote, "panic", v, "stack", string(debug.Stack()))
			}
		}
	}()
	c.srv.handler.ServeHTTP(w, req)
	return true
}

// closeWriteAndWait sends FIN and waits a moment before closing, so that
// the client reads the answer before the reset its unread body provokes
// (net/http's rstAvoidanceDelay).
func (c *conn) closeWriteAndWait() {
	CloseWrite(c.c)
	time.Sleep(500 * time.Millisecond)
}

// CloseWrite half-closes c (sends FIN) when c can, as a TCP connection
// can; a wrapper of a connection calls it from its own CloseWrite, so
// that the half-close reaches the socket through every layer.
func CloseWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// after is the deadline d from now: none (zero) when d is 0.
func after(now time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return now.Add(d)
}

// deadline is a read or write deadline of a connection, as last set. A
// keep-alive connection would otherwise move its deadlines several times
// a request, each move a clock read and a change to the runtime's
// timers (about 4% of a request's CPU); renew leaves one that is within
// a hundredth of the wanted time alone, as the request timeout's shared
// deadlines do (docs/configuration.md: give or take a hundredth).
type deadline struct {
	at  time.Time // zero: none
	set func(time.Time) error
}

// setAt sets the deadline to t unless it is t already.
func (d *deadline) setAt(t time.Time) {
	if !t.Equal(d.at) {
		d.set(t)
		d.at = t
	}
}

// renew sets the deadline timeout from now (none when timeout is 0),
// unless the one set is at most a hundredth of timeout earlier than that.
func (d *deadline) renew(now time.Time, timeout time.Duration) {
	want := after(now, timeout)
	if timeout > 0 && !d.at.IsZero() && !d.at.After(want) && !d.at.Before(want.Add(-timeout/100)) {
		return
	}
	d.setAt(want)
}

// body is a request body framed by its Content-Length.
type body struct {
	br        *bufio.Reader
	remaining int64
}

func (b *body) Read(p []byte) (int, error) {
	if b.remaining <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.br.Read(p)
	b.remaining -= int64(n)
	if err == io.EOF && b.remaining > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *body) Close() error { return nil }

// InBuffer reports whether what is left of the body has been read from the
// connection already, so that reading it cannot block and needs no
// deadline.
func (b *body) InBuffer() bool { return int64(b.br.Buffered()) >= b.remaining }

func leadingCRorLF(b []byte) int {
	n := 0
	for n < len(b) && (b[n] == '\r' || b[n] == '\n') {
		n++
	}
	return n
}

// hasToken says whether any of a field's values lists token.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
