// Package faultlog logs the failures of a background task that retries
// on its own (a poll, a periodic flush, a listener) without flooding the
// log while its cause lasts: a database outage of ten minutes would
// otherwise write a line per task every second or two, each carrying the
// same multi-line error.
package faultlog

import (
	"log/slog"
	"sync"
	"time"
)

// DefaultEvery is the interval between a failing task's lines unless
// Task.Every says otherwise.
const DefaultEvery = time.Minute

// Task reports one task's failures: the first at WARN, then one line an
// Every while it keeps failing, counting those held back (more_like_it),
// and one at INFO when it works again. Its zero value with Log and Msg
// set is ready to use; it is safe for concurrent use.
type Task struct {
	Log   *slog.Logger
	Msg   string        // what failed, said on each line
	Every time.Duration // default DefaultEvery
	Now   func() time.Time

	mu       sync.Mutex
	failures int       // since the task last worked
	held     int       // failures not logged since the last line
	last     time.Time // of the last line
}

// Failed reports a failure, with err and args (key-value pairs) on the
// line when one is written.
func (t *Task) Failed(err error, args ...any) {
	t.mu.Lock()
	now := t.now()
	t.failures++
	every := t.Every
	if every <= 0 {
		every = DefaultEvery
	}
	if t.failures > 1 && now.Sub(t.last) < every {
		t.held++
		t.mu.Unlock()
		return
	}
	held := t.held
	t.held, t.last = 0, now
	t.mu.Unlock()
	args = append(args, "err", err)
	if held > 0 {
		args = append(args, "more_like_it", held)
	}
	t.Log.Warn(t.Msg, args...)
}

// Worked reports a success: after failures, it says so once, with how
// many there were.
func (t *Task) Worked() {
	t.mu.Lock()
	failures := t.failures
	t.failures, t.held = 0, 0
	t.mu.Unlock()
	if failures > 0 {
		t.Log.Info(t.Msg+": works again", "failures", failures)
	}
}

func (t *Task) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}
