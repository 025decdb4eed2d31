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

// heldDatabase makes a database and a holdingProxy to its server, and
// returns the database's URL and its URL through the proxy, with params
// added to the latter's query.
func heldDatabase(t *testing.T, params map[string]string) (url, viaProxy string, proxy *holdingProxy) {
	url = pgtest.NewDatabase(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy = newHoldingProxy(t, u.Host)
	u.Host = proxy.addr.String()
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return url, u.String(), proxy
}

// openHeld opens a store on a new database through a holding proxy
// (heldDatabase), closed when the test ends, and returns the database's
// own URL too.
func openHeld(t *testing.T) (url string, db *postgres.DB, proxy *holdingProxy) {
	url, viaProxy, proxy := heldDatabase(t, nil)
	db, err := postgres.Open(context.Background(), viaProxy, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return url, db, proxy
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
	// One session: the warm-up prepares what the held write sends.
	url, viaProxy, proxy := heldDatabase(t, map[string]string{"pool_max_conns": "1"})
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
		db, err := postgres.Open(context.Background(), viaProxy, postgres.Options{NoBatch: !batched})
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

// A write that reached the server in time but then waits for a lock held
// by a stalled session, while its caller's cancel cannot reach the server
// (held here), gives up by its deadline: it does not go on when the lock
// is freed, after its caller was answered 503.
func TestWritesDoNotWaitForLocksPastTheirDeadline(t *testing.T) {
	url, db, proxy := openHeld(t)
	ctx := context.Background()
	for id := int64(1); id <= 2; id++ {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "before"}); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	watcher, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(ctx)
	for _, w := range []struct {
		name  string
		lock  string // what the stalled session holds
		write func(ctx context.Context) error
		check string // the plant's name afterwards ("" for none)
		id    int64
	}{
		{"update", `SELECT 1 FROM plants WHERE id = 1 FOR UPDATE`, func(ctx context.Context) error {
			return db.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "late"}, nil)
		}, "before", 1},
		{"delete", `SELECT 1 FROM plants WHERE id = 2 FOR UPDATE`, func(ctx context.Context) error {
			return db.DeletePlant(ctx, 2, nil)
		}, "before", 2},
		{"create", `INSERT INTO plants (id, name, created_at) VALUES (3, 'held', now())`, func(ctx context.Context) error {
			_, err := db.CreatePlant(ctx, plantstore.Plant{ID: 3, Name: "late"})
			return err
		}, "", 3},
	} {
		tx, err := holder.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, w.lock); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			done <- w.write(wctx)
		}()
		// Once the write waits for the lock, nothing more reaches the
		// server from this side: not its cancel.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			var waiting int
			if err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting > 0 {
				break
			}
			if time.Now().After(deadline) {
				select {
				case err := <-done:
					t.Fatalf("%s: the write never waited for the lock; it ended: %v", w.name, err)
				default:
					t.Fatalf("%s: the write never waited for the lock", w.name)
				}
			}
		}
		proxy.hold()
		if err := <-done; plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
			t.Errorf("%s past its deadline: %v, want EUNAVAILABLE", w.name, err)
		}
		time.Sleep(500 * time.Millisecond) // the lock outlives the deadline
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // what would go on, goes on
		var name string
		if err := watcher.QueryRow(ctx, `SELECT coalesce((SELECT name FROM plants WHERE id = $1), '')`, w.id).Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name != w.check {
			t.Errorf("%s answered EUNAVAILABLE, then its lock freed: the plant's name is %q, want %q (as before)", w.name, name, w.check)
		}
		proxy.release()
	}
}

// A write that waits for one lock and then another (the plant's row, then
// the event counter, each held by a stalled session) ends by its deadline
// all the same: the cap is on the statement, not on each wait.
func TestWritesWaitingForTwoLocksEndByTheirDeadline(t *testing.T) {
	url, db, proxy := openHeld(t)
	ctx := context.Background()
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "before"}); err != nil {
		t.Fatal(err)
	}
	hold := func(sql string) pgx.Tx {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	plantLock := hold(`SELECT 1 FROM plants WHERE id = 1 FOR UPDATE`)
	counterLock := hold(`SELECT 1 FROM event_counter FOR UPDATE`)
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
		defer cancel()
		done <- db.UpdatePlant(wctx, plantstore.Plant{ID: 1, Name: "late"}, nil)
	}()
	time.Sleep(200 * time.Millisecond) // sent, and waiting for the plant
	proxy.hold()                       // its cancel goes nowhere
	time.Sleep(200 * time.Millisecond)
	plantLock.Rollback(ctx) // at 0.4 s: the write goes on to the counter
	time.Sleep(400 * time.Millisecond)
	counterLock.Rollback(ctx) // at 0.8 s: past the deadline, before a second 0.6 s wait would end
	if err := <-done; plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Errorf("update past its deadline: %v, want EUNAVAILABLE", err)
	}
	time.Sleep(500 * time.Millisecond)
	proxy.release()
	var name string
	direct, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	if err := direct.QueryRow(ctx, `SELECT name FROM plants WHERE id = 1`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if name != "before" {
		t.Errorf("the update answered EUNAVAILABLE %v in, then its locks freed: the plant's name is %q, want %q", time.Since(start).Round(time.Millisecond), name, "before")
	}
}
