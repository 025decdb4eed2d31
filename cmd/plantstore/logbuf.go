package main

import (
	"context"
	"io"
	"sync"
	"time"
)

// bufferedLog batches log lines into one write every flushEvery (or as
// soon as flushAt bytes wait) instead of one write per request, which
// costs a system call each. A line reaches the log at most flushEvery
// late; a SIGKILL loses at most that much; a graceful stop loses nothing.
//
// Nothing that logs ever waits for the log's reader: a line goes to
// memory, and only the flusher writes to the log. Were a request to wait
// for standard error, a reader that stalls (a pipe into a stuck process,
// a terminal's scroll lock) would stop the service, probes included.
// While the reader is stalled, lines wait in memory up to maxPending;
// past it they are dropped and counted, and once a write goes through,
// onDropped reports how many were lost.
type bufferedLog struct {
	out  io.Writer
	kick chan struct{} // wakes the flusher early

	mu      sync.Mutex
	pending []byte // lines not yet written
	spare   []byte // the last write's buffer, for reuse
	dropped int64  // lines dropped since the last report

	// writing orders the writes to out; only flushes take it.
	writing sync.Mutex
	// onDropped, when set (before run starts), reports lines dropped.
	onDropped func(lines int64)
}

const (
	flushEvery = 200 * time.Millisecond
	flushAt    = 64 << 10
	maxPending = 8 << 20
	// lastFlushWait bounds the final flushes at shutdown: a reader that
	// is stalled then must not hold the process.
	lastFlushWait = 2 * time.Second
)

func newBufferedLog(w io.Writer) *bufferedLog {
	return &bufferedLog{out: w, kick: make(chan struct{}, 1)}
}

// Write takes one whole line (slog's handlers and the access log write a
// line at a time) and never blocks on the log's reader.
func (b *bufferedLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	if len(b.pending)+len(p) > maxPending {
		b.dropped++
		b.mu.Unlock()
		return len(p), nil
	}
	b.pending = append(b.pending, p...)
	full := len(b.pending) >= flushAt
	b.mu.Unlock()
	if full {
		b.wake()
	}
	return len(p), nil
}

// wake asks the flusher to write what waits now, without waiting for it.
func (b *bufferedLog) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Flush writes what waits, and waits for the write.
func (b *bufferedLog) Flush() error {
	b.writing.Lock()
	defer b.writing.Unlock()
	b.mu.Lock()
	out := b.pending
	b.pending, b.spare = b.spare[:0], nil
	dropped := b.dropped
	b.dropped = 0
	b.mu.Unlock()
	var err error
	if len(out) > 0 {
		_, err = b.out.Write(out)
	}
	if cap(out) <= 4*flushAt { // a buffer grown by a stall goes
		b.mu.Lock()
		b.spare = out[:0]
		b.mu.Unlock()
	}
	if dropped > 0 && b.onDropped != nil {
		b.onDropped(dropped) // a line of its own, written at the next flush
	}
	return err
}

// FlushWithin flushes, waiting at most d for the write: at shutdown, a
// stalled reader loses the last lines rather than hold the process.
func (b *bufferedLog) FlushWithin(d time.Duration) { within(d, func() { b.Flush() }) }

// within runs f, and returns when it does or after d, whichever is first;
// f may go on after that.
func within(d time.Duration, f func()) {
	done := make(chan struct{})
	go func() {
		f()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// run flushes every flushEvery, and when woken, until ctx ends.
func (b *bufferedLog) run(ctx context.Context) {
	ticker := time.NewTicker(flushEvery)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			b.Flush()
		case <-b.kick:
			b.Flush()
		case <-ctx.Done():
			b.FlushWithin(lastFlushWait)
			return
		}
	}
}
