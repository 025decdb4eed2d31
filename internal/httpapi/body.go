package httpapi

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"time"
)

// readJSONBody checks the request's media type and reads its body, into
// buf (which it may grow; nil is fine), within
// the size limit. It answers 415 for anything but application/json (with no
// charset or charset=utf-8, as RFC 8259 requires UTF-8), 413 above the
// limit, 408 when the client sends too slowly.
func (s *Server) readJSONBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, error) {
	if len(r.Header.Values("Content-Type")) > 1 {
		return nil, errorStatus(http.StatusUnsupportedMediaType, "send exactly one Content-Type header")
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil, errorStatus(http.StatusUnsupportedMediaType, "Content-Type is missing; send application/json")
	}
	if ct != "application/json" { // what nearly every client sends needs no parsing
		mediaType, params, err := mime.ParseMediaType(ct)
		if err != nil || mediaType != "application/json" {
			return nil, errorStatus(http.StatusUnsupportedMediaType, "Content-Type %q is not supported; send application/json", truncate(ct, 100))
		}
		// "utf8" is a common label of UTF-8 too (the WHATWG Encoding
		// Standard's), if not IANA's.
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
			return nil, errorStatus(http.StatusUnsupportedMediaType, "charset %q is not supported; JSON must be UTF-8", truncate(cs, 40))
		}
	}
	if ce, ok := unsupportedCoding(r.Header); !ok {
		// Says which codings a request may take (RFC 9110, section
		// 15.5.16; RFC 7694): none.
		w.Header().Set("Accept-Encoding", "identity")
		return nil, errorStatus(http.StatusUnsupportedMediaType, "Content-Encoding %q is not supported; send the body unencoded", truncate(ce, 40))
	}
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	// The server's read timeout is sized for headers and any body; ours
	// are small, so a body that trickles is cut off much sooner, and
	// gives its slot in flight back. A body that came with its head (most
	// do) cannot trickle: moving the deadline would cost a change to the
	// runtime's timers, and another to move it back after the answer.
	info := infoFrom(r.Context())
	info.bodyRead = true
	waited := false
	if b, ok := r.Body.(interface{ InBuffer() bool }); !ok || !b.InBuffer() {
		http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout))
		waited = true
	}
	// A body of a stated length ends there, and that length is within the
	// limit; only a chunked one needs counting.
	src := r.Body
	if r.ContentLength < 0 {
		src = http.MaxBytesReader(w, r.Body, limit)
	}
	body, err := readAll(buf[:0], src)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge(limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The write deadline was set when the headers arrived and ends
			// about when the read deadline does: give the answer time to go.
			http.NewResponseController(w).SetWriteDeadline(time.Now().Add(5 * time.Second))
			return nil, errorStatus(http.StatusRequestTimeout, "the request body was not received in time")
		}
		if errors.Is(err, http.ErrLineTooLong) {
			// Go says "header line too long" of a chunk's size line.
			return nil, errorStatus(http.StatusBadRequest, "the request body could not be read: a chunk's size line is too long")
		}
		return nil, errorStatus(http.StatusBadRequest, "the request body could not be read: %v", err)
	}
	if waited {
		info.bodyIn = time.Now()
	}
	return body, nil
}

// storeContext is the context a handler that read a body stores in. The
// request's deadline counts from its head; a body that had to be waited
// for moves it to count from the body's end, so that a client's slow
// upload, within --body-read-timeout, is not charged to the service's
// --request-timeout (a 503 that blames the store for the client).
func (s *Server) storeContext(r *http.Request) context.Context {
	ctx := r.Context()
	info := infoFrom(ctx)
	if info.bodyIn.IsZero() {
		return ctx
	}
	return &infoContext{Context: s.deadlines.context(info.bodyIn), info: info}
}

// readAll is io.ReadAll into dst, so a pooled buffer can take the body.
func readAll(dst []byte, r io.Reader) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

func tooLarge(limit int64) error {
	return errorStatus(http.StatusRequestEntityTooLarge, "the request body exceeds the limit of %d bytes", limit)
}

// unsupportedCoding returns the first content coding of a request other
// than identity, and false, or "" and true when there is none. The field
// is a list (RFC 9110, section 8.4), and several lines of it are one list
// (section 5.3): "identity, identity" is as good as two lines of it, and
// a gzip on a second line is as bad as on the first.
func unsupportedCoding(h http.Header) (string, bool) {
	for _, line := range h.Values("Content-Encoding") {
		for coding := range strings.SplitSeq(line, ",") {
			if c := strings.Trim(coding, " \t"); c != "" && !strings.EqualFold(c, "identity") {
				return c, false
			}
		}
	}
	return "", true
}
