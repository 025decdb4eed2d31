package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

// lockFromOutside takes the store's write lock from another connection,
// as another process would, until the test ends or release is called.
func lockFromOutside(t *testing.T, path string) (release func()) {
	t.Helper()
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			conn.ExecContext(context.Background(), `ROLLBACK`)
			conn.Close()
			other.Close()
		})
	}
	t.Cleanup(release)
	return release
}

var plantNamed = regexp.MustCompile(`plant (\d+)`)

// A plant write waits for another process's lock --busy-timeout in all:
// not once more for each of the server's own writes queued before it
// (token use, webhook bookkeeping, each waiting for the same lock), nor
// once more for each write of its batch.
func TestPlantWriteWaitsOneBusyTimeout(t *testing.T) {
	createAll := func(db *DB, n int) ([]error, []time.Duration) {
		errs, took := make([]error, n), make([]time.Duration, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				begin := time.Now()
				_, errs[i] = db.CreatePlant(context.Background(), plantstore.Plant{ID: int64(i + 1), Name: "waits"})
				took[i] = time.Since(begin)
			})
		}
		wg.Wait()
		return errs, took
	}
	check := func(t *testing.T, errs []error, took []time.Duration, bound time.Duration) {
		t.Helper()
		for i := range errs {
			if plantstore.ErrorCode(errs[i]) != plantstore.EUNAVAILABLE {
				t.Errorf("create %d under another process's lock: %v, want %s", i+1, errs[i], plantstore.EUNAVAILABLE)
			}
			// A log line with the request's id names its plant, or
			// none, never a neighbour's.
			for _, m := range plantNamed.FindAllStringSubmatch(fmt.Sprint(errs[i]), -1) {
				if m[1] != fmt.Sprint(i+1) {
					t.Errorf("create %d failed with %q, which names plant %s", i+1, errs[i], m[1])
				}
			}
			if took[i] > bound {
				t.Errorf("create %d answered after %v, want within %v", i+1, took[i].Round(time.Millisecond), bound)
			}
		}
	}
	t.Run("a batch", func(t *testing.T) {
		const busy = 300 * time.Millisecond
		db, path := openTest(t, Options{BusyTimeout: busy})
		lockFromOutside(t, path)
		errs, took := createAll(db, 8)
		check(t, errs, took, 2*busy+busy/2)
	})
	t.Run("behind the server's own waiting writes", func(t *testing.T) {
		const busy = 400 * time.Millisecond
		db, path := openTest(t, Options{BusyTimeout: busy})
		lockFromOutside(t, path)
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				db.CreateToken(context.Background(), plantstore.Token{Name: fmt.Sprint("t", i), Scopes: []string{plantstore.ScopePlantsRead}}, plantstore.TokenHash{byte(i)})
			})
		}
		time.Sleep(50 * time.Millisecond) // the token writes hold the write pool
		errs, took := createAll(db, 4)
		check(t, errs, took, busy+busy/2)
		wg.Wait()
	})
	t.Run("queued behind a batch", func(t *testing.T) {
		// Plant 1's batch waits for the lock; 2 to 4 queue behind it
		// and fail with its wait, each in its own words.
		const busy = 400 * time.Millisecond
		db, path := openTest(t, Options{BusyTimeout: busy})
		lockFromOutside(t, path)
		errs, took := make([]error, 4), make([]time.Duration, 4)
		var wg sync.WaitGroup
		for i := range 4 {
			if i == 1 {
				time.Sleep(50 * time.Millisecond)
			}
			wg.Go(func() {
				begin := time.Now()
				_, errs[i] = db.CreatePlant(context.Background(), plantstore.Plant{ID: int64(i + 1), Name: "queued"})
				took[i] = time.Since(begin)
			})
		}
		wg.Wait()
		check(t, errs, took, busy+busy/2)
		for i, err := range errs {
			if !strings.Contains(err.Error(), fmt.Sprintf("plant %d", i+1)) {
				t.Errorf("create %d failed with %q, which does not name its plant", i+1, err)
			}
		}
	})
	t.Run("after a wait for the pool", func(t *testing.T) {
		// One token write ahead holds the pool for the whole busy
		// timeout: the plant write's own wait for the lock is what is
		// left of its busy timeout, not a busy timeout more.
		const busy = time.Second
		db, path := openTest(t, Options{BusyTimeout: busy})
		lockFromOutside(t, path)
		go db.CreateToken(context.Background(), plantstore.Token{Name: "ahead", Scopes: []string{plantstore.ScopePlantsRead}}, plantstore.TokenHash{1})
		time.Sleep(50 * time.Millisecond)
		errs, took := createAll(db, 1)
		check(t, errs, took, busy+busy/2)
	})
}

// A write whose caller gave up (its context ended: the request's timeout)
// before its transaction began is never made, so that the caller's 503
// does not hide a change: a retried conditional write would otherwise
// find the plant changed by its own first try.
func TestAbandonedWriteIsNotMade(t *testing.T) {
	db, path := openTest(t, Options{BusyTimeout: time.Minute})
	ctx := context.Background()
	for _, id := range []int64{1, 2} {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "before"}); err != nil {
			t.Fatal(err)
		}
	}
	release := lockFromOutside(t, path)
	abandon := func(write func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		return write(ctx)
	}
	errs := []error{
		abandon(func(ctx context.Context) error {
			_, err := db.CreatePlant(ctx, plantstore.Plant{ID: 3, Name: "abandoned"})
			return err
		}),
		abandon(func(ctx context.Context) error {
			return db.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "abandoned"}, nil)
		}),
		abandon(func(ctx context.Context) error { return db.DeletePlant(ctx, 2, nil) }),
	}
	for i, err := range errs {
		if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
			t.Errorf("abandoned write %d: %v, want %s", i, err, plantstore.EUNAVAILABLE)
		}
	}
	release()
	// A write after them commits after them: by then they are settled.
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 4, Name: "after"}); err != nil {
		t.Fatal(err)
	}
	if p, err := db.GetPlant(ctx, 3); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("the abandoned create was stored: %+v, %v", p, err)
	}
	if p, err := db.GetPlant(ctx, 1); err != nil || p.Name != "before" {
		t.Errorf("the abandoned update was made: %+v, %v", p, err)
	}
	if _, err := db.GetPlant(ctx, 2); err != nil {
		t.Errorf("the abandoned delete was made: %v", err)
	}
}

// A batch whose COMMIT fails may have committed (for all the writer can
// tell): no write of it is tried again alone, where a delete would answer
// 404 for its own change; each answers the batch's error. The COMMIT here
// fails on a deferred foreign key a test trigger breaks.
func TestCommitThatMayHaveCommittedIsNotRetriedAlone(t *testing.T) {
	db, _ := openTest(t, Options{})
	ctx := context.Background()
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 13, Name: "doomed"}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`CREATE TABLE test_parent (id INTEGER PRIMARY KEY)`,
		`CREATE TABLE test_child (parent INTEGER REFERENCES test_parent (id) DEFERRABLE INITIALLY DEFERRED)`,
		`CREATE TRIGGER test_break_commit AFTER DELETE ON plants WHEN old.id = 13 BEGIN INSERT INTO test_child VALUES (999); END`,
	} {
		if _, err := db.write.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	batch := []*writeRequest{
		{kind: writeDelete, plant: plantstore.Plant{ID: 13}},
		{kind: writeCreate, plant: plantstore.Plant{ID: 14, Name: "beside it"}},
	}
	results := commitAsWriter(db, batch)
	for i, r := range results {
		if r.err == nil || plantstore.ErrorCode(r.err) == plantstore.ENOTFOUND {
			t.Errorf("%s after a failed COMMIT: %+v, want the batch's error", batch[i].op(), r)
		}
	}
	if _, err := db.GetPlant(ctx, 13); err != nil {
		t.Errorf("plant 13 after the failed batch: %v", err)
	}
}

// A read does not wait for a write stuck behind another process's lock:
// only a batch whose COMMIT has begun can be in what a read finds.
func TestReadsDoNotWaitForAWriteBehindALock(t *testing.T) {
	for _, sole := range []bool{false, true} {
		db, path := openTest(t, Options{BusyTimeout: 2 * time.Second, SoleServer: sole})
		ctx := context.Background()
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "there"}); err != nil {
			t.Fatal(err)
		}
		lockFromOutside(t, path)
		go db.CreatePlant(ctx, plantstore.Plant{ID: 2, Name: "waits"})
		time.Sleep(100 * time.Millisecond) // the writer waits for the lock
		begin := time.Now()
		if _, err := db.GetPlant(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Events(ctx, plantstore.EventQuery{Limit: 10}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took > 500*time.Millisecond {
			t.Errorf("sole=%t: reads took %v while a write waited for the lock", sole, took)
		}
	}
}
