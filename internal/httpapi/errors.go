package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/plantstore/plantstore"
)

// errorBody is the contract's Error: every non-2xx answer carries one, with
// error equal to the HTTP status.
type errorBody struct {
	Error   int32  `json:"error"`
	Message string `json:"message"`
}

// statusError is a failure of the HTTP exchange itself (unsupported media
// type, body too large, no such route), which has no domain code.
type statusError struct {
	status  int
	message string
}

func (e *statusError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.message) }

func errorStatus(status int, format string, args ...any) *statusError {
	return &statusError{status: status, message: fmt.Sprintf(format, args...)}
}

// authError is a refused credential; RFC 6750 asks for a challenge with it.
type authError struct {
	kind        string // plantstore.EUNAUTHORIZED or plantstore.EFORBIDDEN
	code        string // RFC 6750 error code; "" when no credential was sent
	description string
	scope       string // the scope that was missing, for insufficient_scope
}

func (e *authError) Error() string { return e.description }

// challenge is the WWW-Authenticate value of RFC 6750 section 3.
func (e *authError) challenge() string {
	c := `Bearer realm="plantstore"`
	if e.code != "" {
		c += `, error="` + e.code + `", error_description=` + strconv.Quote(e.description)
	}
	if e.scope != "" {
		c += `, scope="` + e.scope + `"`
	}
	return c
}

// statusOf maps every error the handlers see to an HTTP status and a message
// fit for the client. It is the only place that does.
func statusOf(err error) (int, string) {
	if e, ok := errors.AsType[*statusError](err); ok {
		return e.status, e.message
	}
	if e, ok := errors.AsType[*limitError](err); ok {
		return e.status, e.message
	}
	code, message := plantstore.ErrorCode(err), plantstore.ErrorMessage(err)
	if e, ok := errors.AsType[*authError](err); ok {
		code, message = e.kind, e.description
	}
	var status int
	switch code {
	case plantstore.EINVALID:
		status = http.StatusBadRequest
	case plantstore.ENOTFOUND:
		status = http.StatusNotFound
	case plantstore.ECONFLICT:
		status = http.StatusConflict
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
	return status, message
}

// writeError answers with the Error body for err and logs what the client
// does not see.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, message := statusOf(err)
	if e, ok := errors.AsType[*authError](err); ok {
		w.Header().Set("WWW-Authenticate", e.challenge())
	}
	limit, refused := errors.AsType[*limitError](err)
	switch {
	case refused:
		w.Header().Set("Retry-After", retryAfterSeconds(limit.retryAfter))
	case status == http.StatusServiceUnavailable || status == http.StatusInsufficientStorage:
		w.Header().Set("Retry-After", "1")
	}
	// A refusal by a limit is no fault of the service: the access log line
	// names it, and a flood of them must not flood the error log too.
	if status >= 500 && !refused {
		s.log.LogAttrs(r.Context(), slog.LevelError, "request failed",
			slog.String("request_id", requestID(r.Context())), slog.Int("status", status), slog.Any("err", err))
	}
	// Messages may quote the request, which need not be UTF-8; JSON must be.
	writeJSON(w, status, errorBody{Error: int32(status), Message: strings.ToValidUTF8(message, "\uFFFD")})
}
