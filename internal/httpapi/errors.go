package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/plantstore/plantstore"
)

// errorBody is the contract's Error: every non-2xx answer carries one, with
// error equal to the HTTP status.
type errorBody struct {
	Error   int32  `json:"error"`
	Message string `json:"message"`
}

// httpError is a failure of the HTTP exchange itself rather than of the
// domain: a refused credential, a request refused by a limit, an
// unsupported media type, a body too large, no such route. It carries its
// status, the message for the client, and the headers that go with it
// (WWW-Authenticate for a credential, RFC 6750; Retry-After for a limit).
type httpError struct {
	status  int
	message string
	// challenge is the WWW-Authenticate value of a refused credential.
	challenge string
	// bearerError is RFC 6750's error code of a refused credential
	// ("invalid_token", "insufficient_scope"), "" when none was sent.
	bearerError string
	// retryAfter, when set, is how long the client should wait.
	retryAfter time.Duration
	// limit names the limit that refused the request, for the access log;
	// such a refusal is no fault of the service.
	limit string
	// planned marks a 5xx the service means to answer (the drain before a
	// shutdown): the access line is enough, it is no failure to log.
	planned bool
}

func (e *httpError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.message) }

func errorStatus(status int, format string, args ...any) *httpError {
	return &httpError{status: status, message: fmt.Sprintf(format, args...)}
}

// credentialError is a refused credential: 401, or 403 for a missing
// scope, with the challenge of RFC 6750 section 3.
func credentialError(status int, bearerError, description, scope string) *httpError {
	c := `Bearer realm="plantstore"`
	if bearerError != "" {
		c += `, error="` + bearerError + `", error_description=` + strconv.Quote(description)
	}
	if scope != "" {
		c += `, scope="` + scope + `"`
	}
	return &httpError{status: status, message: description, challenge: c, bearerError: bearerError}
}

// limitError is a request refused by the limit named limit, not for
// anything it asked: the client may send it again after retryAfter.
func limitError(limit string, status int, message string, retryAfter time.Duration) *httpError {
	return &httpError{status: status, message: message, retryAfter: retryAfter, limit: limit}
}

// statusOf maps every error the handlers see to an HTTP status and a message
// fit for the client. It is the only place that does.
func statusOf(err error) (int, string) {
	if e, ok := errors.AsType[*httpError](err); ok {
		return e.status, e.message
	}
	var status int
	switch plantstore.ErrorCode(err) {
	case plantstore.EINVALID:
		status = http.StatusBadRequest
	case plantstore.ENOTFOUND:
		status = http.StatusNotFound
	case plantstore.ECONFLICT:
		status = http.StatusConflict
	case plantstore.EPRECONDITION:
		status = http.StatusPreconditionFailed
	case plantstore.EGONE:
		status = http.StatusGone
	case plantstore.EUNAUTHORIZED:
		status = http.StatusUnauthorized
	case plantstore.EFORBIDDEN:
		status = http.StatusForbidden
	case plantstore.EUNAVAILABLE:
		status = http.StatusServiceUnavailable
	case plantstore.EINSUFFICIENT:
		status = http.StatusInsufficientStorage
	default:
		status = http.StatusInternalServerError
	}
	return status, plantstore.ErrorMessage(err)
}

// writeError answers with the Error body for err and logs what the client
// does not see.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, message := statusOf(err)
	e, transport := errors.AsType[*httpError](err)
	switch {
	case transport && e.challenge != "":
		w.Header().Set("WWW-Authenticate", e.challenge)
	case transport && e.retryAfter > 0:
		w.Header().Set("Retry-After", retryAfterSeconds(e.retryAfter))
	case status == http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	case status == http.StatusInsufficientStorage:
		// Space comes back when an operator frees some, or deletes and
		// the feed's pruning free pages: seldom within a second.
		w.Header().Set("Retry-After", "60")
	}
	refused := transport && e.limit != ""
	if refused {
		infoFrom(r.Context()).limit = e.limit
	}
	// A refusal by a limit is no fault of the service: the access log line
	// names it, and a flood of them must not flood the error log too. Nor
	// is a refusal of the request's protocol (HTTP/2's preface, a
	// transfer coding not implemented), though its status is a 5xx.
	protocol := status == http.StatusHTTPVersionNotSupported || status == http.StatusNotImplemented
	if status >= 500 && !refused && !protocol && !(transport && e.planned) {
		attrs := []slog.Attr{slog.String("request_id", requestID(r.Context())), slog.Int("status", status), slog.Any("err", err)}
		if rep := s.repeated[status]; rep != nil {
			rep.report(time.Now(), attrs)
		} else {
			s.log.LogAttrs(r.Context(), slog.LevelError, "request failed", attrs...)
		}
	}
	// Messages may quote the request, which need not be UTF-8; JSON must be.
	writeJSON(w, status, errorBody{Error: int32(status), Message: strings.ToValidUTF8(message, "\uFFFD")})
}

// repeatedErrors lets one ERROR line a second through for a status that
// an outage gives every request (503: the store cannot answer; 507: it is
// full): under load, a line a request would bury the cause in its own
// copies. A line held back is not lost: the last one of a second goes out
// when the second ends, its more_like_it counting the others held back
// with it, so that an outage's last second is counted too. Every request
// still has its access log line. A 500, a bug, is always logged.
type repeatedErrors struct {
	log *slog.Logger

	mu     sync.Mutex
	next   time.Time   // when the next line may go out
	held   []slog.Attr // the last line held back; nil when none is
	missed int         // lines held back besides held
	timer  *time.Timer // writes held when the second ends
}

// FlushErrorLog writes the error lines held back in the last second now:
// call it at shutdown, once the last request is answered.
func (s *Server) FlushErrorLog() {
	for _, r := range s.repeated {
		r.Flush()
	}
}

func newRepeatedErrors(log *slog.Logger) *repeatedErrors { return &repeatedErrors{log: log} }

// report writes a request's line now, or holds it back until the second
// ends when a line went out less than a second ago.
func (r *repeatedErrors) report(now time.Time, attrs []slog.Attr) {
	r.mu.Lock()
	if now.Before(r.next) {
		if r.held != nil {
			r.missed++
		}
		r.held = attrs
		if r.timer == nil {
			r.timer = time.AfterFunc(r.next.Sub(now), r.Flush)
		}
		r.mu.Unlock()
		return
	}
	// The second is over but its held line may not be written yet (its
	// timer has yet to run): this line counts it, so one line a second it
	// is.
	if r.held != nil {
		r.missed++
	}
	r.held = attrs
	line := r.take(now)
	r.mu.Unlock()
	r.write(line)
}

// Flush writes the line held back, if any, now: when its second ends, and
// at shutdown.
func (r *repeatedErrors) Flush() {
	r.mu.Lock()
	line := r.take(time.Now())
	r.mu.Unlock()
	r.write(line)
}

// take returns the held line, with more_like_it counting the others, as
// the line of the second that begins at now; nil when none is held. Call
// it with mu held.
func (r *repeatedErrors) take(now time.Time) []slog.Attr {
	attrs, missed := r.held, r.missed
	r.held, r.missed = nil, 0
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	if attrs == nil {
		return nil
	}
	r.next = now.Add(time.Second)
	if missed > 0 {
		attrs = append(attrs, slog.Int("more_like_it", missed))
	}
	return attrs
}

func (r *repeatedErrors) write(line []slog.Attr) {
	if line != nil {
		r.log.LogAttrs(context.Background(), slog.LevelError, "request failed", line...)
	}
}
