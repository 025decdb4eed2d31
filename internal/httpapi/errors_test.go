package httpapi

import (
	"net/http"
	"testing"

	"github.com/plantstore/plantstore"
)

// Every error code of the domain has its status here, in the one place
// that maps them; an error without a code is a 500.
func TestEveryErrorCodeHasItsStatus(t *testing.T) {
	for code, want := range map[string]int{
		plantstore.EINVALID:      http.StatusBadRequest,
		plantstore.ENOTFOUND:     http.StatusNotFound,
		plantstore.ECONFLICT:     http.StatusConflict,
		plantstore.EPRECONDITION: http.StatusPreconditionFailed,
		plantstore.EGONE:         http.StatusGone,
		plantstore.EUNAUTHORIZED: http.StatusUnauthorized,
		plantstore.EFORBIDDEN:    http.StatusForbidden,
		plantstore.EUNAVAILABLE:  http.StatusServiceUnavailable,
		plantstore.EINSUFFICIENT: http.StatusInsufficientStorage,
		plantstore.EINTERNAL:     http.StatusInternalServerError,
		"":                       http.StatusInternalServerError,
	} {
		if got, _ := statusOf(plantstore.Errorf(code, "x")); got != want {
			t.Errorf("code %q: status %d, want %d", code, got, want)
		}
	}
}
