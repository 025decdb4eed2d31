package httpapi_test

import (
	"net"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/httpapi"
)

// acceptAll accepts on ln until it is closed, handing each connection
// over on the channel it returns.
func acceptAll(t *testing.T, ln net.Listener) <-chan net.Conn {
	t.Helper()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range accepted {
			c.Close()
		}
	})
	return accepted
}

func dialN(t *testing.T, ln net.Listener, n int) {
	t.Helper()
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
}

// awaitCounts waits until counts reads open and waits, which Accept's
// goroutine moves a moment after a dial returns.
func awaitCounts(t *testing.T, counts *httpapi.ConnCounts, open, waits int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for counts.Open() != open || counts.Waits() != waits {
		if time.Now().After(deadline) {
			t.Fatalf("%d open and %d waits, want %d and %d", counts.Open(), counts.Waits(), open, waits)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func loopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// At the cap, Accept counts one wait each time it finds the cap reached
// (at once, before any other client comes), and a connection closed gives
// its place back once, however many times it is closed.
func TestConnCountsAtTheCap(t *testing.T) {
	counts := new(httpapi.ConnCounts)
	ln := httpapi.LimitConnections(loopback(t), 2, nil, counts)
	accepted := acceptAll(t, ln)
	awaitCounts(t, counts, 0, 0)
	dialN(t, ln, 2)
	first, second := <-accepted, <-accepted
	awaitCounts(t, counts, 2, 1)

	dialN(t, ln, 1) // waits in the kernel's queue
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted with the cap of 2 reached")
	case <-time.After(100 * time.Millisecond):
	}
	awaitCounts(t, counts, 2, 1)

	first.Close()
	first.Close()
	third := <-accepted
	awaitCounts(t, counts, 2, 2) // the third's place taken, the cap reached again
	second.Close()
	third.Close()
	awaitCounts(t, counts, 0, 2)
}

// Counts are kept without a cap too, when asked for, and Accept never
// waits; with neither a cap nor counts the listener is left as it is.
func TestConnCountsWithoutCap(t *testing.T) {
	counts := new(httpapi.ConnCounts)
	ln := httpapi.LimitConnections(loopback(t), 0, nil, counts)
	accepted := acceptAll(t, ln)
	dialN(t, ln, 3)
	conns := []net.Conn{<-accepted, <-accepted, <-accepted}
	awaitCounts(t, counts, 3, 0)
	for _, c := range conns {
		c.Close()
	}
	awaitCounts(t, counts, 0, 0)

	plain := loopback(t)
	defer plain.Close()
	if got := httpapi.LimitConnections(plain, 0, nil, nil); got != plain {
		t.Errorf("no cap and no counts: the listener was wrapped (%T)", got)
	}
}
