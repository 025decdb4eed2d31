package faultlog_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/faultlog"
)

// A task failing every second for three minutes writes one line a minute
// (counting the others), then one when it works again; a second outage
// starts afresh.
func TestRepeatedFailuresAreHeldBack(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	task := &faultlog.Task{
		Log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})),
		Msg: "read the roster",
		Now: func() time.Time { return now },
	}
	task.Worked() // nothing failed: nothing to say
	for range 180 {
		task.Failed(errors.New("connection refused"), "retry_in", "1s")
		now = now.Add(time.Second)
	}
	task.Worked()
	task.Worked()
	task.Failed(errors.New("timeout"))
	want := []string{
		`level=WARN msg="read the roster" retry_in=1s err="connection refused"`,
		`level=WARN msg="read the roster" retry_in=1s err="connection refused" more_like_it=59`,
		`level=WARN msg="read the roster" retry_in=1s err="connection refused" more_like_it=59`,
		`level=INFO msg="read the roster: works again" failures=180`,
		`level=WARN msg="read the roster" err=timeout`,
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
