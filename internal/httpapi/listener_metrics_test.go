package httpapi_test

import (
	"errors"
	"net"
	"net/netip"
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
	ln := httpapi.LimitConnections(loopback(t), httpapi.ConnLimits{Max: 2}, nil, counts)
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
	ln := httpapi.LimitConnections(loopback(t), httpapi.ConnLimits{}, nil, counts)
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
	if got := httpapi.LimitConnections(plain, httpapi.ConnLimits{}, nil, nil); got != plain {
		t.Errorf("no cap and no counts: the listener was wrapped (%T)", got)
	}
}

// dialFrom connects to ln from the loopback address from.
func dialFrom(t *testing.T, ln net.Listener, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer says whether the server closed c without a byte (an
// end of file, or a reset), within 2 s.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && err != nil && !isTimeout(err)
}

// One address may hold PerAddress connections: the next from it is closed
// at once, unanswered, and counted, while another address is accepted;
// a connection closed gives its address's place back. A refused one
// holds no place under Max: with Max 3, after three refusals the second
// address still gets in without a wait.
func TestConnectionsPerAddress(t *testing.T) {
	counts := new(httpapi.ConnCounts)
	ln := httpapi.LimitConnections(loopback(t), httpapi.ConnLimits{Max: 3, PerAddress: 2}, nil, counts)
	accepted := acceptAll(t, ln)
	dialFrom(t, ln, "127.0.0.1")
	dialFrom(t, ln, "127.0.0.1")
	first, _ := <-accepted, <-accepted
	for range 3 {
		if !closedByServer(dialFrom(t, ln, "127.0.0.1")) {
			t.Fatal("a third connection from one address was not closed with a cap of 2 an address")
		}
	}
	if counts.Refused() != 3 {
		t.Errorf("%d connections counted as refused, want 3", counts.Refused())
	}
	dialFrom(t, ln, "127.0.0.2")
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("a connection from another address was not accepted: the refused ones held places")
	}
	awaitCounts(t, counts, 3, 1) // the cap of 3 reached by the three accepted

	first.Close()
	awaitCounts(t, counts, 2, 1)
	fourth := dialFrom(t, ln, "127.0.0.1")
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("a connection from the address was not accepted after one of its two closed")
	}
	fourth.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := fourth.Read(make([]byte, 1)); !isTimeout(err) {
		t.Errorf("the accepted connection was closed (%v)", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// The exempt addresses (trusted proxies) have no cap of their own.
func TestConnectionsPerAddressExempt(t *testing.T) {
	counts := new(httpapi.ConnCounts)
	ln := httpapi.LimitConnections(loopback(t), httpapi.ConnLimits{PerAddress: 1,
		Exempt: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, nil, counts)
	accepted := acceptAll(t, ln)
	for range 3 {
		dialFrom(t, ln, "127.0.0.1")
	}
	for range 3 {
		select {
		case <-accepted:
		case <-time.After(5 * time.Second):
			t.Fatal("a connection from an exempt address was not accepted")
		}
	}
	if counts.Refused() != 0 {
		t.Errorf("%d refused from an exempt address", counts.Refused())
	}
}

// fakeListener accepts a connection for each remote address sent on it,
// as if from there.
type fakeListener struct {
	remotes chan net.Addr
	done    chan struct{}
}

func (l *fakeListener) Accept() (net.Conn, error) {
	select {
	case a := <-l.remotes:
		local, remote := net.Pipe()
		t := remotePipe{local, a}
		go func() { remote.Read(make([]byte, 1)); remote.Close() }() // ends when closed
		return t, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *fakeListener) Close() error   { close(l.done); return nil }
func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

type remotePipe struct {
	net.Conn
	remote net.Addr
}

func (c remotePipe) RemoteAddr() net.Addr { return c.remote }

// An IPv6 client counts as its /64 (one host commonly holds a whole
// /64), a zoned one without its zone, and an IPv4-mapped one as its IPv4
// address.
func TestConnectionsPerAddressIPv6(t *testing.T) {
	fake := &fakeListener{remotes: make(chan net.Addr), done: make(chan struct{})}
	counts := new(httpapi.ConnCounts)
	ln := httpapi.LimitConnections(fake, httpapi.ConnLimits{PerAddress: 1,
		Exempt: []netip.Prefix{netip.MustParsePrefix("fe80::/10")}}, nil, counts)
	acceptAll(t, ln)
	var sent int64
	for _, tc := range []struct {
		from    string
		refused int64 // the count after it
	}{
		{"[2001:db8::1]:1", 0},
		{"[2001:db8::2]:1", 1},     // the same /64
		{"[2001:db8:0:1::1]:1", 1}, // another
		{"10.0.0.1:1", 1},
		{"[::ffff:10.0.0.1]:1", 2}, // the same address
		{"[fe80::1%eth0]:1", 2},    // exempt, zone and all
		{"[fe80::1%eth0]:2", 2},
	} {
		fake.remotes <- net.TCPAddrFromAddrPort(netip.MustParseAddrPort(tc.from))
		sent++
		// Open, or refused: none is closed here.
		for deadline := time.Now().Add(5 * time.Second); counts.Open()+counts.Refused() < sent && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if got := counts.Refused(); got != tc.refused {
			t.Errorf("after a connection from %s: %d refused, want %d", tc.from, got, tc.refused)
		}
	}
}
