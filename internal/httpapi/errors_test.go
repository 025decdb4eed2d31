package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

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

// A request that comes as its second ends, before the timer has written
// the line held back in that second, makes one line for both, not two
// in the same instant: one line a second, every request counted.
func TestRepeatedErrorsOneLineASecond(t *testing.T) {
	var logs bytes.Buffer
	r := newRepeatedErrors(slog.New(slog.NewJSONHandler(&logs, nil)))
	line := func(id string) []slog.Attr { return []slog.Attr{slog.String("request_id", id)} }
	t0 := time.Now()
	r.report(t0, line("a"))                           // written
	r.report(t0.Add(300*time.Millisecond), line("b")) // held
	r.report(t0.Add(600*time.Millisecond), line("c")) // held, b counted
	// The second is over; its timer (due in 1 s of real time) has not run.
	r.report(t0.Add(1001*time.Millisecond), line("d"))
	r.Flush() // nothing is left to write
	var got []string
	for l := range strings.Lines(logs.String()) {
		var m struct {
			ID   string `json:"request_id"`
			Like int    `json:"more_like_it"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s+%d", m.ID, m.Like))
	}
	if want := []string{"a+0", "d+2"}; !slices.Equal(got, want) {
		t.Errorf("lines %v, want %v (request id + more_like_it)", got, want)
	}
}
