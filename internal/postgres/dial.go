package postgres

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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

// dialGate spaces out the attempts to open a session at an address whose
// last attempt failed. While the database is down, every request that
// finds no idle connection would otherwise try one: thousands of attempts
// a second under load, each a connection the server's host must refuse or
// a start-up the server must turn down, and, the moment it is back, a
// crowd at its door.
//
// An attempt fails when its dial fails (the port closed, the host
// unreachable), or when the connection is accepted and closed before the
// session is ready (the server starting up or shutting down, a database
// closed to connections, a proxy that accepts and resets, a start-up that
// timed out). Within the pause after a failure, a dial to that address
// fails at once with the failure's error (a request gets its 503 as
// before, sooner); once the pause is over, one attempt goes ahead and the
// others fail at once until it ends. A session that starts ends the
// pauses. The readiness probe waits for the pause too: at most a second
// after the database is back.
//
// pgconn tells the gate the outcome through three hooks, installed by
// install: DialFunc (every connection, the cancel requests' too),
// AfterNetConnect (a connection that will start a session) and
// AfterConnect (a session that started).
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
	// trying is set while the one attempt allowed after the pause runs.
	trying bool
}

func newDialGate(dial pgconn.DialFunc) *dialGate {
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext
	}
	return &dialGate{dial: dial, now: time.Now, down: map[string]*dialPause{}}
}

// install puts the gate in cfg's path of every connection.
func (g *dialGate) install(cfg *pgconn.Config) {
	cfg.DialFunc = g.DialContext
	afterNet, after := cfg.AfterNetConnect, cfg.AfterConnect
	cfg.AfterNetConnect = func(ctx context.Context, cfg *pgconn.Config, conn net.Conn) (net.Conn, error) {
		if c := gatedOf(conn); c != nil {
			c.startsSession(ctx)
		}
		if afterNet != nil {
			return afterNet(ctx, cfg, conn)
		}
		return conn, nil
	}
	// The server's reason for refusing a session (a wrong password, a
	// database that does not exist, too many connections) comes as an
	// error before it closes the connection: the gate keeps it, so that
	// the dials refused in the pause after say why, not only the one
	// request that tried.
	onPgError := cfg.OnPgError
	cfg.OnPgError = func(pgConn *pgconn.PgConn, pgErr *pgconn.PgError) bool {
		if c := gatedOf(pgConn.Conn()); c != nil {
			c.refused(pgErr)
		}
		if onPgError != nil {
			return onPgError(pgConn, pgErr)
		}
		return true
	}
	cfg.AfterConnect = func(ctx context.Context, pgConn *pgconn.PgConn) error {
		if after != nil {
			if err := after(ctx, pgConn); err != nil {
				return err // pgconn closes the connection: a failed attempt
			}
		}
		if c := gatedOf(pgConn.Conn()); c != nil {
			c.started()
		}
		return nil
	}
}

// DialContext is a pgconn.DialFunc.
func (g *dialGate) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	p := g.down[addr]
	if p != nil {
		if g.now().Before(p.until) || p.trying {
			err := p.err
			g.mu.Unlock()
			return nil, err
		}
		p.trying = true
	}
	g.mu.Unlock()

	conn, err := g.dial(ctx, network, addr)
	if err != nil {
		g.ended(addr, p != nil, err)
		return nil, err
	}
	return &gatedConn{Conn: conn, gate: g, addr: addr, trying: p != nil}, nil
}

// ended records the end of an attempt at addr: err nil for a session that
// started, else the failure. trying says whether the attempt was the one
// allowed after a pause.
func (g *dialGate) ended(addr string, trying bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.down[addr]
	if p != nil && trying {
		p.trying = false
	}
	switch {
	case err == nil:
		delete(g.down, addr)
	case errors.Is(err, context.Canceled):
		// The caller gave up (a client went away): no news of the server.
	case p == nil:
		g.down[addr] = &dialPause{pause: firstDialPause, until: g.now().Add(firstDialPause), err: err}
	default:
		p.pause = min(2*p.pause, lastDialPause)
		p.until, p.err = g.now().Add(p.pause), err
	}
}

// gatedConn is a connection the gate let through. It reports how its
// attempt ended: when its session starts, or when it is closed before
// that. A connection that starts no session (a cancel request) reports
// nothing of the server.
type gatedConn struct {
	net.Conn
	gate *dialGate
	addr string

	mu      sync.Mutex
	trying  bool
	session context.Context // the start-up's context, until it ends
	reason  error           // the server's error during the start-up
	done    bool
}

func (c *gatedConn) startsSession(ctx context.Context) {
	c.mu.Lock()
	c.session = ctx
	c.mu.Unlock()
}

func (c *gatedConn) started() { c.end(nil) }

// refused keeps the server's error during the start-up as the reason the
// attempt failed.
func (c *gatedConn) refused(err error) {
	c.mu.Lock()
	if c.session != nil && !c.done {
		c.reason = err
	}
	c.mu.Unlock()
}

func (c *gatedConn) Close() error {
	c.mu.Lock()
	// A start-up whose time ran out met a server that accepts connections
	// and does not answer (stopped, or stalled).
	failed := errSessionFailed{addr: c.addr, reason: c.reason,
		timedOut: c.session != nil && errors.Is(c.session.Err(), context.DeadlineExceeded)}
	c.mu.Unlock()
	c.end(failed)
	return c.Conn.Close()
}

// end reports the attempt's outcome once; a connection that started no
// session only gives back the attempt it held.
func (c *gatedConn) end(err error) {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	c.done = true
	session := c.session
	c.session = nil
	c.mu.Unlock()
	switch {
	case session == nil:
		err = context.Canceled // no news: see ended
	case err != nil && errors.Is(session.Err(), context.Canceled):
		err = context.Canceled
	}
	c.gate.ended(c.addr, c.trying, err)
}

// errSessionFailed is the error of the dials refused in the pause after a
// connection accepted and then closed before its session started, with
// the server's reason when it gave one.
type errSessionFailed struct {
	addr     string
	reason   error // nil when the server said nothing
	timedOut bool  // the start-up's time ran out first
}

func (e errSessionFailed) Error() string {
	if e.reason != nil {
		return fmt.Sprintf("the server at %s refused the last session: %v", e.addr, e.reason)
	}
	if e.timedOut {
		return fmt.Sprintf("the server at %s accepted the last connection but did not start its session in time", e.addr)
	}
	return fmt.Sprintf("the last connection to %s closed before its session started", e.addr)
}

func (e errSessionFailed) Unwrap() error { return e.reason }

// gatedOf finds the gatedConn under conn, through TLS.
func gatedOf(conn net.Conn) *gatedConn {
	for {
		switch c := conn.(type) {
		case *gatedConn:
			return c
		case *tls.Conn:
			conn = c.NetConn()
		default:
			return nil
		}
	}
}
