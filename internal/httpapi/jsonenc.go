package httpapi

import (
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json"

	"github.com/plantstore/plantstore"
)

// The answers of the hot routes (a plant, a page of plants, an error) are
// encoded by hand: appending a handful of known fields costs a fraction of
// a reflective Marshal, and every request pays it. The output is byte for
// byte what json.Marshal writes for the same struct (TestAppendMatchesMarshal
// and FuzzAppendJSONString check it), so the two can never drift apart.

// jsonAppender is a body that can encode itself.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

func (p plantBody) appendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendJSONString(b, p.Name)
	if p.Tag != nil {
		b = append(b, `,"tag":`...)
		b = appendJSONString(b, *p.Tag)
	}
	return append(b, '}')
}

func (p storedPlantBody) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, p.ID, 10)
	b = append(b, `,"name":`...)
	b = appendJSONString(b, p.Name)
	if p.Tag != nil {
		b = append(b, `,"tag":`...)
		b = appendJSONString(b, *p.Tag)
	}
	return append(b, '}')
}

// plantPage is a page of plants as GET /plants answers it: each a
// storedPlantBody, encoded straight from the store's plants.
type plantPage []plantstore.Plant

func (page plantPage) appendJSON(b []byte) []byte {
	b = append(b, '[')
	for i, p := range page {
		if i > 0 {
			b = append(b, ',')
		}
		b = storedPlant(p).appendJSON(b)
	}
	return append(b, ']')
}

func (e errorBody) appendJSON(b []byte) []byte {
	b = append(b, `{"error":`...)
	b = strconv.AppendInt(b, int64(e.Error), 10)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.Message)
	return append(b, '}')
}

func (s statusBody) appendJSON(b []byte) []byte {
	b = append(b, `{"status":`...)
	b = appendJSONString(b, s.Status)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string the way json.Marshal does by
// default: quotes, backslashes and control characters below U+0020
// escaped (the common ones in their short forms), everything else as is;
// invalid UTF-8 becomes U+FFFD. The ASCII fast path copies runs of plain
// bytes at once.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, s[start:i]...)
				b = append(b, "\ufffd"...)
				i++
				start = i
				continue
			}
			i += size
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Request and answer bodies are held in pooled buffers: one allocation fewer per
// request, and none growing for a long page. Buffers that grew past
// maxPooledBuffer (a page of 1,000 long names) are left to the collector,
// so the pool does not pin the largest page ever sent.
const maxPooledBuffer = 64 << 10

var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// chunkingThreshold is the size of the buffer in which net/http holds an
// answer to learn its length; a longer answer without a Content-Length
// is sent chunked.
const chunkingThreshold = 2048

// Header values shared by every answer. The slices are never appended to
// in place (their length is their capacity), so sharing them is safe.
var (
	jsonContentType = []string{"application/json"}
	gzipCoding      = []string{"gzip"}
	noStore         = []string{"no-store"}
	nosniff         = []string{"nosniff"}
)

// writeJSON answers with v as JSON. Our values always encode, so an error
// here can only be the client going away.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeJSONTagged(w, nil, status, v, nil, false) // without r, no If-Match to fail
}

// writeJSONTagged answers with v as JSON under the ETag that etag makes of
// the encoded body (nil: no ETag), or with 304 when r's If-None-Match
// names it. A tagged answer may be kept by the client and revalidated;
// any other is not to be stored. A compressible answer goes gzipped to a
// client that takes gzip, when it is long enough to gain (compress.go).
// When r's If-Match names no current tag, it writes nothing and returns
// errStaleIfMatch, for the caller's writeError.
func writeJSONTagged(w http.ResponseWriter, r *http.Request, status int, v any, etag func(body []byte) string, compressible bool) error {
	bp := bodyBuffers.Get().(*[]byte)
	b := (*bp)[:0]
	if a, ok := v.(jsonAppender); ok {
		b = a.appendJSON(b)
	} else {
		out, err := json.Marshal(v)
		if err != nil {
			status = http.StatusInternalServerError
			out = []byte(`{"error":500,"message":"internal error"}`)
			etag = nil
		}
		b = append(b, out...)
	}
	h := w.Header()
	gz := compressible && len(b) > compressAbove && acceptsGzip(r)
	if etag != nil {
		tag := etag(b)
		sent := tag
		if gz {
			sent = gzipETag(tag)
		}
		// Either coding's tag names the same state of the resource,
		// whichever coding this answer takes.
		if r != nil {
			unchanged, err := readConditions(r, tag)
			if err != nil {
				putBuffer(bp, b)
				return err
			}
			if unchanged {
				answerNotModified(w, sent)
				putBuffer(bp, b)
				return nil
			}
		}
		h["Etag"] = []string{sent}
		h["Cache-Control"] = revalidate
	} else {
		h["Cache-Control"] = noStore
	}
	h["Content-Type"] = jsonContentType
	if gz {
		zp := bodyBuffers.Get().(*[]byte)
		z := gzipTo((*zp)[:0], b)
		putBuffer(bp, b)
		bp, b = zp, z
		h["Content-Encoding"] = gzipCoding
	}
	if len(b) > chunkingThreshold || compressible {
		// Said up front, a long body goes out as is; net/http would
		// otherwise send it in chunks, which cost more writes.
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
	}
	w.WriteHeader(status)
	w.Write(b)
	putBuffer(bp, b)
	return nil
}

// putBuffer gives b, grown from *bp, back to the pool, unless it grew too
// large to keep.
func putBuffer(bp *[]byte, b []byte) {
	if cap(b) <= maxPooledBuffer {
		*bp = b[:0]
		bodyBuffers.Put(bp)
	}
}
