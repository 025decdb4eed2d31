package plantstore

import (
	"errors"
	"fmt"
)

// Error codes: the few kinds of failure the service distinguishes. The HTTP
// transport maps each to one status, in one place.
const (
	EINVALID      = "invalid"      // the request is malformed or breaks a rule
	ENOTFOUND     = "not_found"    // the thing asked for does not exist
	ECONFLICT     = "conflict"     // the request contradicts stored state
	EPRECONDITION = "precondition" // a write's precondition does not hold for the stored state
	EGONE         = "gone"         // what was asked for existed but is no longer kept
	EUNAUTHORIZED = "unauthorized" // no valid credential
	EFORBIDDEN    = "forbidden"    // a valid credential without the right
	EUNAVAILABLE  = "unavailable"  // the store cannot serve now; retrying may work
	EINSUFFICIENT = "insufficient" // the store is out of space
	EINTERNAL     = "internal"     // a bug or an unexpected fault
)

// Error is a failure with a code and a message fit to show a client. Err, if
// set, is the underlying cause, for logs only.
type Error struct {
	Code    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// PlantNotFound is every store's answer for a plant id it does not hold,
// worded once so that both engines answer alike.
func PlantNotFound(id int64) *Error {
	return Errorf(ENOTFOUND, "plant %d not found", id)
}

// WrapError returns an *Error with the given code and message whose cause is
// err, so the cause reaches the log but not the client.
func WrapError(code, message string, err error) *Error {
	return &Error{Code: code, Message: message, Err: err}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL
// for any other non-nil error, and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the client-facing message of the first *Error in
// err's chain, or "internal error" for any other error, whose text may hold
// details a client must not see.
func ErrorMessage(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Message
	}
	return "internal error"
}
