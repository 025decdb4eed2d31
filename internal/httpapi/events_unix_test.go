//go:build unix

package httpapi_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/httpapi"
)

// A stream catching up a backlog ends at shutdown too, though each of its
// reads finds more: the server's Shutdown waits for the page being sent,
// not for the whole backlog (or for its own timeout).
func TestEventStreamCatchingUpEndsOnShutdown(t *testing.T) {
	e := start(t, options{shutdownTimeout: 10 * time.Second})
	e.createBacklog(t)
	// A small receive buffer, so that the kernel does not take the whole
	// backlog off the server's hands at once.
	resp := e.streamWithReceiveBuffer(t, "?after=0", 16<<10)
	defer resp.Body.Close()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		buf := make([]byte, 4096)
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond) // a slow client: ~800 KB/s
		}
	}()
	time.Sleep(500 * time.Millisecond)
	begin := time.Now()
	e.stop() // returns when Serve does: once no request is in flight, or after the timeout
	took := time.Since(begin)
	t.Logf("the server stopped %v after shutdown began", took.Round(time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("the server took %v to stop: it waited for the catching-up stream", took.Round(time.Millisecond))
	}
	resp.Body.Close()
	<-ended
}

// A stream whose client stopped reading ends at shutdown too, though its
// write is blocked and the request timeout is far: the shutdown does not
// wait for that write (or fail at its own timeout).
func TestEventStreamOfAStalledClientEndsOnShutdown(t *testing.T) {
	e := start(t, options{shutdownTimeout: 10 * time.Second, cfg: httpapi.Config{RequestTimeout: 30 * time.Second}})
	e.createBacklog(t)
	resp := e.streamWithReceiveBuffer(t, "?after=0", 4<<10)
	defer resp.Body.Close() // never read: the client has stalled
	time.Sleep(time.Second) // the server's send buffer fills, its write blocks
	begin := time.Now()
	e.stop()
	took := time.Since(begin)
	t.Logf("the server stopped %v after shutdown began", took.Round(time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("the server took %v to stop: it waited for the stalled stream's write", took.Round(time.Millisecond))
	}
	if strings.Contains(e.logs.String(), "the client did not take a write") {
		t.Errorf("a stream ended by the shutdown is logged as a slow client's:\n%s", e.logs)
	}
}

// createBacklog stores ~7.5 MB of events: more than the kernel buffers on
// loopback (the server's send buffer grows to 4 MB), and seconds for a
// slow client to read.
func (e *env) createBacklog(t *testing.T) {
	t.Helper()
	const n = 28800
	name := strings.Repeat("n", plantstore.MaxNameLength)
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := range n / 32 {
				if _, err := e.db.CreatePlant(context.Background(), plantstore.Plant{ID: int64(w*n + i + 1), Name: name}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A stream whose client stops reading ends once a write is not taken
// within the request timeout, and says so in the log: its access line
// alone would look like an ordinary end.
func TestEventStreamEndsForAStalledClient(t *testing.T) {
	e := start(t, options{cfg: httpapi.Config{RequestTimeout: 300 * time.Millisecond}})
	resp := e.streamWithReceiveBuffer(t, "", 4<<10)
	defer resp.Body.Close() // never read: the client has stalled
	name := strings.Repeat("n", plantstore.MaxNameLength)
	for i := range 20000 {
		if _, err := e.db.CreatePlant(context.Background(), plantstore.Plant{ID: int64(i + 1), Name: name}); err != nil {
			t.Fatal(err)
		}
		if i%500 == 0 && strings.Contains(e.logs.String(), "event stream ended: the client did not take a write") {
			return
		}
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(e.logs.String(), "event stream ended: the client did not take a write") {
			return
		}
	}
	t.Errorf("no log line says why the stalled client's stream ended:\n%s", e.logs)
}

// streamWithReceiveBuffer opens an event stream (query: "?after=0", or
// "") with the read token, over a connection whose receive buffer is
// rcvbuf bytes: a client the kernel cannot take much on behalf of.
func (e *env) streamWithReceiveBuffer(t *testing.T, query string, rcvbuf int) *http.Response {
	t.Helper()
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf) })
		return err
	}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	req, err := http.NewRequest("GET", e.url+"/events"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+e.readToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
