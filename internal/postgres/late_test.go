package postgres_test

import (
	"context"
	"errors"
	"io"
	"net"
	neturl "net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
)

// holdingProxy relays connections to a server and, while held, keeps
// what clients send from it: a network that stalls, or a server that
// stops reading, with the statements queued on the way. Released, it
// sends what it kept, even for a client that has hung up since.
type holdingProxy struct {
	addr   net.Addr
	mu     sync.Mutex
	held   bool
	resume *sync.Cond
}

func newHoldingProxy(t *testing.T, target string) *holdingProxy {
	p := &holdingProxy{}
	p.resume = sync.NewCond(&p.mu)
	t.Cleanup(p.release)
	p.addr = apitest.Relay(t, target, func(in, out net.Conn) {
		go func() { io.Copy(in, out); in.Close() }()
		defer out.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := in.Read(buf)
			p.mu.Lock()
			for p.held {
				p.resume.Wait()
			}
			p.mu.Unlock()
			if n > 0 {
				if _, werr := out.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	return p
}

func (p *holdingProxy) hold() { p.mu.Lock(); p.held = true; p.mu.Unlock() }

func (p *holdingProxy) release() {
	p.mu.Lock()
	p.held = false
	p.mu.Unlock()
	p.resume.Broadcast()
}

// A write whose caller was answered because the database did not answer
// in time never takes effect later, when its statement, held on the way
// past the deadline, reaches the server: a create (batched or not), an
// update or a delete. Else a create answered 503 and retried elsewhere
// would come back after the plant was deleted. (A conditional write is a
// transaction, whose BEGIN waits for its answer: held, nothing follows it.)
func TestWritesThatArriveAfterTheirDeadlineAreNotMade(t *testing.T) {
	url := pgtest.NewDatabase(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newHoldingProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = proxy.addr.String()
	q := viaProxy.Query()
	q.Set("pool_max_conns", "1") // one session: the warm-up prepares what the held write sends
	viaProxy.RawQuery = q.Encode()
	direct, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(context.Background())
	nameOf := func(id int64) string {
		var name string
		err := direct.QueryRow(context.Background(), `SELECT name FROM plants WHERE id = $1`, id).Scan(&name)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		return name // "" when there is none
	}
	for _, batched := range []bool{true, false} {
		db, err := postgres.Open(context.Background(), viaProxy.String(), postgres.Options{NoBatch: !batched})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		base := int64(1000)
		if !batched {
			base = 2000
		}
		for _, w := range []struct {
			name  string
			write func(ctx context.Context, id int64) error
			// what the plant id is named after the write held past its
			// deadline and then let through: as before it
			before, want string
		}{
			{"create", func(ctx context.Context, id int64) error {
				_, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "late"})
				return err
			}, "", ""},
			{"delete", func(ctx context.Context, id int64) error { return db.DeletePlant(ctx, id, nil) }, "before", "before"},
			{"update", func(ctx context.Context, id int64) error {
				return db.UpdatePlant(ctx, plantstore.Plant{ID: id, Name: "late"}, nil)
			}, "before", "before"},
		} {
			base += 10
			warm, held := base+1, base+2
			for _, id := range []int64{warm, held} {
				if w.before != "" {
					if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: w.before}); err != nil {
						t.Fatal(err)
					}
				}
			}
			// The same write once, let through: its statement is then
			// prepared on the session, and the held one goes in one send.
			if err := w.write(ctx, warm); err != nil {
				t.Fatalf("%s, let through: %v", w.name, err)
			}
			proxy.hold()
			tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err := w.write(tctx, held)
			cancel()
			if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
				t.Errorf("batched %v, %s held past its deadline: %v, want EUNAVAILABLE", batched, w.name, err)
			}
			proxy.release()
			// Long enough for the held statement to reach the server and
			// run; the pool's next session goes through the proxy too.
			time.Sleep(300 * time.Millisecond)
			if _, err := db.GetPlant(ctx, warm); err != nil && plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
				t.Fatal(err)
			}
			if got := nameOf(held); got != w.want {
				t.Errorf("batched %v: %s held past its deadline, then let through: the plant's name is %q, want %q (as before)", batched, w.name, got, w.want)
			}
		}
		db.Close()
	}
}
