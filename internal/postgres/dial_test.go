package postgres

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// While an address refuses connections, attempts to it are spaced out by
// a pause that doubles up to a second, each call within it failing at
// once with the last error; a success ends the pauses, and a caller that
// gave up says nothing of the server.
func TestDialGateSpacesOutAttempts(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	var dials int
	up := false
	g := newDialGate(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials++
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if up {
			c, _ := net.Pipe()
			return c, nil
		}
		return nil, refused
	})
	now := time.Unix(0, 0)
	g.now = func() time.Time { return now }
	dial := func() error {
		c, err := g.DialContext(context.Background(), "tcp", "db:5432")
		if c != nil {
			c.Close()
		}
		return err
	}

	for range 100 {
		if err := dial(); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial while down: %v, want the refusal", err)
		}
	}
	if dials != 1 {
		t.Fatalf("%d attempts within the first pause, want 1", dials)
	}
	// The pauses double: 50, 100, 200 ms ... up to 1 s.
	for i, pause := range []time.Duration{50, 100, 200, 400, 800, 1000, 1000} {
		now = now.Add(pause*time.Millisecond - time.Millisecond)
		dial()
		if dials != i+1 {
			t.Fatalf("an attempt before the pause of %d ms ended", pause)
		}
		now = now.Add(time.Millisecond)
		dial()
		if dials != i+2 {
			t.Fatalf("no attempt once the pause of %d ms ended", pause)
		}
	}
	// Another address is not held back.
	if _, err := g.DialContext(context.Background(), "tcp", "other:5432"); err == nil || dials != 9 {
		t.Fatalf("another address: %v after %d attempts", err, dials)
	}
	// Back up: the first attempt after the pause connects, and the next
	// failure starts again from the shortest pause.
	up = true
	now = now.Add(time.Second)
	if err := dial(); err != nil {
		t.Fatalf("dial once the server is back: %v", err)
	}
	if err := dial(); err != nil || dials != 11 {
		t.Fatalf("dial after a success: %v, %d attempts", err, dials)
	}
	up = false
	dial()
	now = now.Add(50 * time.Millisecond)
	before := dials
	dial()
	if dials != before+1 {
		t.Error("after a success, the pause did not start again from 50 ms")
	}
	// A caller that gave up is no news of the server.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g2 := newDialGate(func(ctx context.Context, _, _ string) (net.Conn, error) { return nil, ctx.Err() })
	g2.DialContext(ctx, "tcp", "db:5432")
	if len(g2.down) != 0 {
		t.Error("a cancelled dial started a pause")
	}
}
