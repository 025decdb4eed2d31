package main

import (
	"bufio"
	"context"
	"io"
	"sync"
	"time"
)

// bufferedLog batches log lines into one write every flushEvery (or 64
// KiB) instead of one write per request, which costs a system call each.
// A line reaches the log at most flushEvery late; a SIGKILL loses at most
// that much; a graceful stop loses nothing.
type bufferedLog struct {
	mu sync.Mutex
	w  *bufio.Writer
}

const flushEvery = 200 * time.Millisecond

func newBufferedLog(w io.Writer) *bufferedLog {
	return &bufferedLog{w: bufio.NewWriterSize(w, 64<<10)}
}

func (b *bufferedLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

func (b *bufferedLog) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Flush()
}

// run flushes every flushEvery until ctx ends.
func (b *bufferedLog) run(ctx context.Context) {
	ticker := time.NewTicker(flushEvery)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			b.Flush()
		case <-ctx.Done():
			b.Flush()
			return
		}
	}
}
