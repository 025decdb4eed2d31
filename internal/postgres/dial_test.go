package postgres

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeAttempts drives a dialGate as pgconn does, against a server whose
// state the test sets.
type fakeAttempts struct {
	g     *dialGate
	now   time.Time
	dials int
	// refuse fails the dial; closeEarly accepts the connection and closes
	// it before the session starts.
	refuse, closeEarly bool
}

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

func newFakeAttempts() *fakeAttempts {
	f := &fakeAttempts{now: time.Unix(0, 0)}
	f.g = newDialGate(func(ctx context.Context, network, addr string) (net.Conn, error) {
		f.dials++
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if f.refuse {
			return nil, errRefused
		}
		c, _ := net.Pipe()
		return c, nil
	})
	f.g.now = func() time.Time { return f.now }
	return f
}

// session tries to start a session at addr, as pgconn does: dial, then
// either the session starts or the connection is closed.
func (f *fakeAttempts) session(ctx context.Context, addr string) error {
	c, err := f.g.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	gatedOf(c).startsSession(ctx)
	if f.closeEarly || ctx.Err() != nil {
		c.Close()
		return errors.New("closed before the session started")
	}
	gatedOf(c).started()
	c.Close()
	return nil
}

func (f *fakeAttempts) try() error { return f.session(context.Background(), "db:5432") }

// While an address refuses connections, attempts to it are spaced out by
// a pause that doubles up to a second, each call within it failing at
// once with the last error; a session that starts ends the pauses, and a
// caller that gave up says nothing of the server.
func TestDialGateSpacesOutAttempts(t *testing.T) {
	f := newFakeAttempts()
	f.refuse = true
	for range 100 {
		if err := f.try(); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial while down: %v, want the refusal", err)
		}
	}
	if f.dials != 1 {
		t.Fatalf("%d attempts within the first pause, want 1", f.dials)
	}
	// The pauses double: 50, 100, 200 ms ... up to 1 s.
	for i, pause := range []time.Duration{50, 100, 200, 400, 800, 1000, 1000} {
		f.now = f.now.Add(pause*time.Millisecond - time.Millisecond)
		f.try()
		if f.dials != i+1 {
			t.Fatalf("an attempt before the pause of %d ms ended", pause)
		}
		f.now = f.now.Add(time.Millisecond)
		f.try()
		if f.dials != i+2 {
			t.Fatalf("no attempt once the pause of %d ms ended", pause)
		}
	}
	// Another address is not held back.
	if err := f.session(context.Background(), "other:5432"); err == nil || f.dials != 9 {
		t.Fatalf("another address: %v after %d attempts", err, f.dials)
	}
	// Back up: the first attempt after the pause connects, and the next
	// failure starts again from the shortest pause.
	f.refuse = false
	f.now = f.now.Add(time.Second)
	if err := f.try(); err != nil {
		t.Fatalf("a session once the server is back: %v", err)
	}
	if err := f.try(); err != nil || f.dials != 11 {
		t.Fatalf("a session after a success: %v, %d attempts", err, f.dials)
	}
	f.refuse = true
	f.try()
	f.now = f.now.Add(50 * time.Millisecond)
	before := f.dials
	f.try()
	if f.dials != before+1 {
		t.Error("after a success, the pause did not start again from 50 ms")
	}
	// A caller that gave up is no news of the server.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g := newFakeAttempts()
	g.session(ctx, "db:5432")
	if len(g.g.down) != 0 {
		t.Error("a cancelled dial started a pause")
	}
}

// A connection accepted and closed before its session started (the
// server starting up or shutting down, a proxy that resets) is a failed
// attempt too; a connection that starts no session (a cancel request, or
// TLS refused before sslmode=prefer tries without) is no news; nor is a
// start-up its caller gave up.
func TestDialGateCountsSessionsThatFailToStart(t *testing.T) {
	f := newFakeAttempts()
	f.closeEarly = true
	for range 100 {
		var failed errSessionFailed
		if err := f.try(); f.dials > 1 && !errors.As(err, &failed) {
			t.Fatalf("a session within the pause: %v, want errSessionFailed", err)
		}
	}
	if f.dials != 1 {
		t.Fatalf("%d attempts within the pause after a session that failed to start, want 1", f.dials)
	}
	f.now = f.now.Add(50 * time.Millisecond)
	f.closeEarly = false
	if err := f.try(); err != nil {
		t.Fatalf("the attempt after the pause: %v", err)
	}
	if len(f.g.down) != 0 {
		t.Fatal("a session that started did not end the pauses")
	}

	// No session: a cancel request's connection, or TLS refused.
	c, err := f.g.DialContext(context.Background(), "tcp", "db:5432")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if len(f.g.down) != 0 {
		t.Error("a connection that started no session started a pause")
	}
	// A start-up whose caller gave up.
	ctx, cancel := context.WithCancel(context.Background())
	c, err = f.g.DialContext(ctx, "tcp", "db:5432")
	if err != nil {
		t.Fatal(err)
	}
	gatedOf(c).startsSession(ctx)
	cancel()
	c.Close()
	if len(f.g.down) != 0 {
		t.Error("a start-up cancelled by its caller started a pause")
	}
}

// Once a pause is over, one attempt goes ahead; the others fail at once
// until it ends, whatever its end.
func TestDialGateLetsOneAttemptThroughAfterAPause(t *testing.T) {
	f := newFakeAttempts()
	f.closeEarly = true
	f.try()
	f.now = f.now.Add(time.Second)
	first, err := f.g.DialContext(context.Background(), "tcp", "db:5432")
	if err != nil {
		t.Fatalf("the attempt after the pause: %v", err)
	}
	if _, err := f.g.DialContext(context.Background(), "tcp", "db:5432"); err == nil {
		t.Fatal("a second attempt went ahead while the first ran")
	}
	if f.dials != 2 {
		t.Fatalf("%d dials, want 2", f.dials)
	}
	// The first one ends with no news (say, a cancel request): the next
	// may go.
	first.Close()
	second, err := f.g.DialContext(context.Background(), "tcp", "db:5432")
	if err != nil {
		t.Fatalf("the attempt after one with no news: %v", err)
	}
	gatedOf(second).startsSession(context.Background())
	gatedOf(second).started()
	second.Close()
	if len(f.g.down) != 0 {
		t.Error("the session that started did not end the pauses")
	}
}

// A start-up whose time ran out (a server that accepts connections and
// does not answer: stopped with SIGSTOP, or stalled) is a failed attempt,
// and the dials refused in the pause after say so rather than that the
// server closed the connection.
func TestDialGateSaysAStartUpTimedOut(t *testing.T) {
	f := newFakeAttempts()
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	c, err := f.g.DialContext(context.Background(), "tcp", "db:5432")
	if err != nil {
		t.Fatal(err)
	}
	gatedOf(c).startsSession(ctx)
	c.Close()
	err = f.try()
	var failed errSessionFailed
	if !errors.As(err, &failed) || !strings.Contains(err.Error(), "did not start its session in time") {
		t.Errorf("a dial in the pause after a start-up that timed out: %v", err)
	}
	f.closeEarly = true
	f.now = f.now.Add(time.Second)
	f.try()
	if err := f.try(); err == nil || strings.Contains(err.Error(), "in time") {
		t.Errorf("a dial in the pause after a connection closed early: %v, want no timeout in it", err)
	}
}
