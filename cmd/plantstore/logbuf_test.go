package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stallingWriter is a log's reader that can stall, as a pipe into a
// process that stopped reading does: while stalled, Write waits.
type stallingWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	gate chan struct{} // non-nil while stalled
}

func (w *stallingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	gate := w.gate
	w.mu.Unlock()
	if gate != nil {
		<-gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *stallingWriter) stall() {
	w.mu.Lock()
	w.gate = make(chan struct{})
	w.mu.Unlock()
}

func (w *stallingWriter) resume() {
	w.mu.Lock()
	close(w.gate)
	w.gate = nil
	w.mu.Unlock()
}

func (w *stallingWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// While the reader is stalled, writes return at once; past maxPending
// lines are dropped, and once the reader is back the rest are written in
// order and the dropped ones counted.
func TestBufferedLogNeverWaitsForItsReader(t *testing.T) {
	w := &stallingWriter{}
	b := newBufferedLog(w)
	var dropped atomic.Int64
	b.onDropped = func(n int64) { dropped.Add(n) }
	ctx, cancel := context.WithCancel(context.Background())
	var flusher sync.WaitGroup
	flusher.Go(func() { b.run(ctx) })

	w.stall()
	line := []byte(strings.Repeat("x", 1023) + "\n")
	lines := 2 * maxPending / len(line)
	began := time.Now()
	for i := range lines {
		if n, err := b.Write(line); n != len(line) || err != nil {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("%d writes with the reader stalled took %v", lines, took)
	}
	w.resume()
	cancel()
	flusher.Wait()
	// Kept: maxPending's worth, and the lines of the write the stall
	// caught, taken out of memory before it (as many as came before the
	// flusher ran); the rest dropped, and counted.
	written := strings.Count(w.String(), "\n")
	if kept := maxPending / len(line); written < kept || written >= lines {
		t.Errorf("%d lines written of %d, want at least the %d kept, and some dropped", written, lines, kept)
	}
	if got := dropped.Load(); got != int64(lines-written) {
		t.Errorf("%d lines reported dropped, want %d (%d written of %d)", got, lines-written, written, lines)
	}
}

// serve goes on answering, probes included, while its standard error is
// not read, and stops within its bounds then too; once the reader is
// back, the lines come, the dropped ones counted.
func TestServeWithStalledLog(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "stall")
	stderr := &stallingWriter{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "plantstore.db")}, os.Environ(), nil, nil, stderr)
	}()
	defer func() {
		cancel()
		<-done
	}()
	var url string
	addr := regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`)
	for deadline := time.Now().Add(20 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			url = "http://" + m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("serve did not say it listens:\n%s", stderr)
		}
	}

	stderr.stall()
	client := &http.Client{Timeout: 5 * time.Second}
	const requests = 1500 // some 300 KB of access log, past a pipe's 64 KiB
	began := time.Now()
	for i := range requests {
		path := "/plants/1"
		if i%10 == 0 {
			path = "/healthz"
		}
		req, _ := http.NewRequest("GET", url+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d with the log's reader stalled: %v", i, err)
		}
		resp.Body.Close()
	}
	t.Logf("%d requests in %v with the log stalled", requests, time.Since(began).Round(time.Millisecond))
	if n := strings.Count(stderr.String(), `"msg":"request"`); n != 0 {
		t.Errorf("%d access lines reached the stalled log", n)
	}
	stderr.resume()
	for deadline := time.Now().Add(5 * time.Second); strings.Count(stderr.String(), `"msg":"request"`) < requests; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d access lines once the reader was back, want %d", strings.Count(stderr.String(), `"msg":"request"`), requests)
		}
	}

	// Stalled at shutdown, a flush caught in its write: serve still
	// stops, and in time.
	stderr.stall()
	defer stderr.resume()
	if resp, err := client.Get(url + "/healthz"); err == nil {
		resp.Body.Close()
	}
	time.Sleep(2 * flushEvery) // the line's flush is waiting on the reader
	cancel()
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("serve with the log stalled: %v", err)
		}
	case <-time.After(2*lastFlushWait + 3*time.Second):
		t.Fatalf("serve did not stop within %v with its log stalled", 2*lastFlushWait+3*time.Second)
	}
}
