package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/auth"
	"github.com/plantstore/plantstore/internal/httpapi"
)

// holdSyncs makes the writer's WAL syncs wait for the test: each sync
// says it began on the returned channel, then waits for release.
func holdSyncs(t *testing.T, db *DB) (began <-chan struct{}, release func()) {
	t.Helper()
	if !db.durable.syncsWAL() {
		t.Fatal("the writer does not sync the WAL itself: commits sync in SQLite")
	}
	b, r := make(chan struct{}, 100), make(chan struct{})
	sync := db.durable.syncWAL
	db.durable.syncWAL = func() error {
		b <- struct{}{}
		<-r
		return sync()
	}
	return b, func() { close(r) }
}

// stillWaiting fails the test if done delivers within a short while.
func stillWaiting[T any](t *testing.T, what string, done <-chan T) {
	t.Helper()
	select {
	case v := <-done:
		t.Fatalf("%s answered before the WAL was synced: %v", what, v)
	case <-time.After(100 * time.Millisecond):
	}
}

// readInBackground reads plant id and says on the channel whether it has
// the name.
func readInBackground(db *DB, id int64, name string) <-chan error {
	read := make(chan error, 1)
	go func() {
		p, err := db.GetPlant(context.Background(), id)
		if err == nil && p.Name != name {
			err = errors.New("read " + p.Name)
		}
		read <- err
	}()
	return read
}

// A write is answered only once the WAL holding it is synced, and a read
// that finds it in SQLite before then waits as long: no answer carries a
// write a crash could still undo.
func TestNoAnswerBeforeTheWALIsSynced(t *testing.T) {
	for _, sole := range []bool{false, true} {
		db, _ := openTest(t, Options{SoleServer: sole})
		ctx := context.Background()
		if sole {
			waitComplete(t, db)
		}
		began, release := holdSyncs(t, db)
		created := make(chan error, 1)
		go func() {
			_, err := db.CreatePlant(ctx, plantstore.Plant{ID: 7, Name: "fern"})
			created <- err
		}()
		<-began // committed, and syncing
		stillWaiting(t, "the create", created)
		read := readInBackground(db, 7, "fern")
		if sole {
			// The replica learns of the plant only once it is durable.
			if err := <-read; plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
				t.Errorf("sole server: the plant being synced reads %v, want ENOTFOUND", err)
			}
		} else {
			stillWaiting(t, "a read from SQLite", read)
		}
		release()
		if err := <-created; err != nil {
			t.Fatalf("the create: %v", err)
		}
		if !sole {
			if err := <-read; err != nil {
				t.Fatalf("the read: %v", err)
			}
		}
		if p, err := db.GetPlant(ctx, 7); err != nil || p.Name != "fern" {
			t.Errorf("sole=%t: after the sync the plant reads %v, %v", sole, p, err)
		}
	}
}

// A read that finds a batch in SQLite between its COMMIT and its sync
// waits for the sync, however the read and the commit interleave.
func TestReadRightAfterACommitWaitsForTheSync(t *testing.T) {
	db, _ := openTest(t, Options{})
	ctx := context.Background()
	inWindow, proceed := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(proceed) })
	t.Cleanup(release) // before the store's Close, which waits for the writer
	var first sync.Once
	db.afterCommit = func() {
		first.Do(func() {
			close(inWindow)
			<-proceed
		})
	}
	created := make(chan error, 1)
	go func() {
		_, err := db.CreatePlant(ctx, plantstore.Plant{ID: 7, Name: "fern"})
		created <- err
	}()
	<-inWindow // committed; not synced
	read := readInBackground(db, 7, "fern")
	stillWaiting(t, "a read right after the COMMIT", read)
	release()
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}

// Each batch is synced once, and the write connection goes back to the
// pool with synchronous=FULL, which the other writers (tokens, webhooks)
// count on for their own durability.
func TestEachBatchIsSyncedAndFullIsRestored(t *testing.T) {
	db, _ := openTest(t, Options{})
	if !db.durable.syncsWAL() {
		t.Fatal("the writer does not sync the WAL itself")
	}
	var syncs atomic.Int64
	sync := db.durable.syncWAL
	db.durable.syncWAL = func() error { syncs.Add(1); return sync() }
	ctx := context.Background()
	for i := range 20 {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: int64(i), Name: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := syncs.Load(); n != 20 {
		t.Errorf("%d syncs for 20 creates one after another, want 20", n)
	}
	if c, s := db.durable.committed.Load(), db.durable.synced.Load(); c != s {
		t.Errorf("%d batches committed, %d synced", c, s)
	}
	var level int
	if err := db.write.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&level); err != nil || level != 2 {
		t.Errorf("the write pool's synchronous after the batches: %d, %v; want 2 (FULL)", level, err)
	}
}

// Under load the writer keeps the write connection from one batch to the
// next, at synchronous=NORMAL; another writer that waits for it gets it
// within a batch, at FULL, while the creates go on.
func TestOtherWritersGetFullUnderLoad(t *testing.T) {
	db, _ := openTest(t, Options{})
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var created atomic.Int64
	// More writers than a batch takes, so that writes are always queued
	// when a batch is answered.
	for g := range maxBatch + maxBatch/2 {
		wg.Go(func() {
			for i := int64(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: int64(g)<<32 | i, Name: "p"}); err != nil {
					t.Error(err)
					return
				}
				created.Add(1)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	for created.Load() < 2*maxBatch {
		time.Sleep(time.Millisecond)
	}
	for i := range 20 {
		// Were the writer to keep the connection while others wait, this
		// would wait as long as the creates go on: until the deadline.
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var level int
		err := db.write.QueryRowContext(qctx, `PRAGMA synchronous`).Scan(&level)
		cancel()
		if err != nil || level != 2 {
			t.Fatalf("query %d on the write pool under load: synchronous %d, %v; want 2 (FULL)", i, level, err)
		}
		tok := plantstore.Token{Name: fmt.Sprintf("t%d", i), Scopes: []string{"plants:read"}}
		if _, err := db.CreateToken(ctx, tok, plantstore.HashToken(fmt.Sprint("secret", i))); err != nil {
			t.Fatalf("token %d under load: %v", i, err)
		}
	}
	if n := created.Load(); n < 4*maxBatch {
		t.Errorf("only %d creates while the other writers ran", n)
	}
}

// After a failed sync nothing is acknowledged again: the kernel may have
// dropped what it could not write, and a later sync could succeed
// without it. Writes, reads of what may be lost, and Ping all fail.
func TestFailedSyncStopsAcknowledging(t *testing.T) {
	db, _ := openTest(t, Options{})
	ctx := context.Background()
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "durable"}); err != nil {
		t.Fatal(err)
	}
	var syncs atomic.Int64
	db.durable.syncWAL = func() error { syncs.Add(1); return errors.New("input/output error") }
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 2, Name: "lost?"}); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Fatalf("a create whose sync failed: %v, want EUNAVAILABLE", err)
	}
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 3, Name: "later"}); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Errorf("a create after the failed sync: %v, want EUNAVAILABLE", err)
	}
	if n := syncs.Load(); n != 1 {
		t.Errorf("%d syncs tried, want 1: none after the failure", n)
	}
	if _, err := db.GetPlant(ctx, 2); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Errorf("a read of the plant that may be lost: %v, want EUNAVAILABLE", err)
	}
	if err := db.Ping(ctx); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Errorf("Ping after the failed sync: %v, want EUNAVAILABLE", err)
	}
}

// Writes queued while a sync fails are not committed at all: they answer
// the failure, and SQLite never sees them.
func TestWritesQueuedBehindAFailedSyncAreNotCommitted(t *testing.T) {
	db, _ := openTest(t, Options{})
	ctx := context.Background()
	began, fail := make(chan struct{}, 10), make(chan struct{})
	db.durable.syncWAL = func() error {
		began <- struct{}{}
		<-fail
		return errors.New("input/output error")
	}
	create := func(id int64) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "p"})
			done <- err
		}()
		return done
	}
	first := create(1)
	<-began
	second := create(2)
	for deadline := time.Now().Add(5 * time.Second); len(db.writes) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second create never queued")
		}
	}
	close(fail)
	for i, done := range []<-chan error{first, second} {
		if err := <-done; plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
			t.Errorf("create %d: %v, want EUNAVAILABLE", i+1, err)
		}
	}
	if n := len(began); n != 0 {
		t.Errorf("%d more syncs after the failed one", n)
	}
	var n int
	if err := db.read.QueryRowContext(ctx, `SELECT count(*) FROM plants WHERE id = 2`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the create queued behind the failed sync: %d rows, %v; want none", n, err)
	}
}

// A store reopened after a clean close (SQLite removed its WAL then) syncs
// the WAL itself again: the fallback to FULL commits is for a file
// without WAL, not for a restart.
func TestReopenedStoreSyncsItsWAL(t *testing.T) {
	db, path := openTest(t, Options{})
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Logf("the WAL after a clean close: %v", err)
	}
	db, err := Open(context.Background(), path, Options{SoleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if !db.durable.syncsWAL() {
		t.Fatal("the reopened store commits with FULL: it found no WAL to sync")
	}
	if p, err := db.GetPlant(context.Background(), 1); err != nil || p.Name != "p" {
		t.Errorf("plant 1 after the reopen: %v, %v", p, err)
	}
}

// Over HTTP, a failed sync (of the WAL, or of the database file in a
// background checkpoint) is the service's fault, said in the contract's
// Error body: the create whose sync failed gets 503, as do later creates,
// and /readyz says the server is not ready.
func TestFailedSyncOverHTTP(t *testing.T) {
	for _, fault := range []struct {
		name, message string
		cause         func(t *testing.T, db *DB)
	}{
		{"the WAL's", "save a write", func(t *testing.T, db *DB) {
			db.durable.syncWAL = func() error { return errors.New("input/output error") }
		}},
		// The checkpointer's sync of the database file (checkpoint.go):
		// the store is stopped before the request.
		{"a checkpoint's", "save a checkpoint", func(t *testing.T, db *DB) {
			checkpointWith(t, db, checkpointResult{err: errors.New("disk I/O error"), syncFailed: true})
		}},
	} {
		t.Run(fault.name, func(t *testing.T) {
			db, _ := openTest(t, Options{SoleServer: true})
			ctx := context.Background()
			token := plantstore.NewToken()
			if _, err := db.CreateToken(ctx, plantstore.Token{Name: "t", Scopes: plantstore.KnownScopes}, plantstore.HashToken(token)); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(httpapi.NewServer(db, auth.New(db, auth.Options{}), httpapi.Config{}))
			defer srv.Close()
			client := apitest.Client(t)
			fault.cause(t, db)

			do := func(method, path, body string) (int, string, errorBody) {
				t.Helper()
				req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+token)
				if body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var e errorBody
				json.NewDecoder(resp.Body).Decode(&e)
				return resp.StatusCode, resp.Header.Get("Content-Type"), e
			}
			for i, req := range []struct{ method, path, body string }{
				{"POST", "/plants", `{"id": 1001, "name": "fern"}`},
				{"POST", "/plants", `{"id": 1002, "name": "moss"}`},
				{"GET", "/readyz", ""},
			} {
				status, ctype, e := do(req.method, req.path, req.body)
				if status != http.StatusServiceUnavailable || ctype != "application/json" || e.Error != 503 || e.Message == "" {
					t.Errorf("%d: %s %s after a failed sync: %d %q %+v; want 503, application/json and an Error body", i, req.method, req.path, status, ctype, e)
				}
				if req.method == "POST" && !strings.Contains(e.Message, fault.message) {
					t.Errorf("%d: the message %q does not say the disk failed to %s", i, e.Message, fault.message)
				}
			}
		})
	}
}

type errorBody struct {
	Error   int    `json:"error"`
	Message string `json:"message"`
}
