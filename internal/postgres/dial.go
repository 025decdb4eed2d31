package postgres

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The pause after a failed connection attempt doubles from
// firstDialPause to lastDialPause while the attempts keep failing.
const (
	firstDialPause = 50 * time.Millisecond
	lastDialPause  = time.Second
)

// dialGate spaces out the connection attempts to an address whose last
// one failed. While the database is down, every request that finds no
// idle connection would otherwise dial it: thousands of attempts a second
// under load, each a connection the server's host must refuse, and, the
// moment it is back, a crowd at its door. Within the pause after a failed
// attempt, a dial to that address fails at once with the attempt's error
// (a request gets its 503 as before, sooner); the first one after it
// tries again. A success ends the pauses. The readiness probe waits for
// the pause too: at most a second after the database is back.
type dialGate struct {
	dial pgconn.DialFunc
	now  func() time.Time

	mu   sync.Mutex
	down map[string]*dialPause
}

type dialPause struct {
	until time.Time
	pause time.Duration
	err   error
}

func newDialGate(dial pgconn.DialFunc) *dialGate {
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext
	}
	return &dialGate{dial: dial, now: time.Now, down: map[string]*dialPause{}}
}

// DialContext is a pgconn.DialFunc.
func (g *dialGate) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	if p := g.down[addr]; p != nil && g.now().Before(p.until) {
		err := p.err
		g.mu.Unlock()
		return nil, err
	}
	g.mu.Unlock()

	conn, err := g.dial(ctx, network, addr)

	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil:
		delete(g.down, addr)
	case errors.Is(err, context.Canceled):
		// The caller gave up (a client went away): no news of the server.
	default:
		p := g.down[addr]
		if p == nil {
			p = &dialPause{pause: firstDialPause}
			g.down[addr] = p
		} else {
			p.pause = min(2*p.pause, lastDialPause)
		}
		p.until, p.err = g.now().Add(p.pause), err
	}
	return conn, err
}
