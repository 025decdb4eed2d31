package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/storetest"
)

func openTest(t *testing.T, opts Options) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plants.db")
	db, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) plantstore.Store {
		db, _ := openTest(t, Options{})
		return db
	})
}

// One transaction per create must behave the same: it is the benchmarks'
// baseline.
func TestConformanceWithoutGroupCommit(t *testing.T) {
	storetest.Run(t, func(t *testing.T) plantstore.Store {
		db, _ := openTest(t, Options{NoGroupCommit: true})
		return db
	})
}

// When the store fills under concurrent creates, batches fail part-way;
// every create must still be answered truly: stored when it succeeded,
// absent when it failed.
func TestConcurrentCreatesUntilFull(t *testing.T) {
	db, _ := openTest(t, Options{MaxBytes: 256 << 10})
	name := strings.Repeat("y", 200)
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[int64]error{}
	for w := range 32 {
		wg.Go(func() {
			for i := int64(0); ; i++ {
				id := int64(w)<<32 | i
				_, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: name})
				mu.Lock()
				results[id] = err
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	stored, refused := 0, 0
	for id, err := range results {
		_, getErr := db.GetPlant(context.Background(), id)
		switch {
		case err == nil && getErr == nil:
			stored++
		case plantstore.ErrorCode(err) == plantstore.EINSUFFICIENT && plantstore.ErrorCode(getErr) == plantstore.ENOTFOUND:
			refused++
		default:
			t.Errorf("plant %d: create said %v, the store says %v", id, err, getErr)
		}
	}
	if stored == 0 || refused != 32 {
		t.Errorf("%d stored, %d refused; want some stored and each of 32 writers refused once", stored, refused)
	}
}

func TestCloseAnswersQueuedCreates(t *testing.T) {
	db, path := openTest(t, Options{})
	var wg sync.WaitGroup
	errs := make([]error, 200)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = db.CreatePlant(context.Background(), plantstore.Plant{ID: int64(i), Name: "p"})
		})
	}
	db.Close()
	wg.Wait()
	again, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for i, err := range errs {
		_, getErr := again.GetPlant(context.Background(), int64(i))
		if err == nil && getErr != nil {
			t.Errorf("create %d succeeded but is not stored: %v", i, getErr)
		}
		if err != nil && plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
			t.Errorf("create %d during Close: %v", i, err)
		}
	}
}

// The durability promise rests on these settings of the writing connection.
func TestDurableSettings(t *testing.T) {
	db, _ := openTest(t, Options{})
	var mode string
	var sync int
	if err := db.write.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := db.write.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 {
		t.Errorf("journal_mode=%s synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
}

func TestMigrationsRecordedAndIdempotent(t *testing.T) {
	db, path := openTest(t, Options{})
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	db.write.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n)
	if n != len(ms) {
		t.Fatalf("%d migrations recorded, want %d", n, len(ms))
	}
	db.Close()
	again, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer again.Close()
	again.write.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n)
	if n != len(ms) {
		t.Errorf("after reopen %d migrations recorded, want %d", n, len(ms))
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	db, path := openTest(t, Options{})
	if _, err := db.write.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '0999_future.sql', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err := Open(context.Background(), path, Options{})
	if err == nil || !strings.Contains(err.Error(), "newer than this plantstore") {
		t.Fatalf("Open on a newer schema = %v, want a refusal", err)
	}
}

func TestConcurrentOpensOfNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plants.db")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			db, err := Open(context.Background(), path, Options{BusyTimeout: 10 * time.Second})
			if err == nil {
				db.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("open %d: %v", i, err)
		}
	}
}

// A lock held by another process (the token CLI, say) past the busy
// timeout is the store being unavailable, not a client error.
func TestBusyIsUnavailable(t *testing.T) {
	db, path := openTest(t, Options{BusyTimeout: 50 * time.Millisecond})
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	_, err = db.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "a"})
	if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Errorf("create under a foreign lock = %v, want %s", err, plantstore.EUNAVAILABLE)
	}
	conn.ExecContext(context.Background(), `ROLLBACK`)
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "a"}); err != nil {
		t.Errorf("create after the lock is gone: %v", err)
	}
}

func TestFullIsInsufficient(t *testing.T) {
	db, _ := openTest(t, Options{MaxBytes: 64 << 10})
	name := strings.Repeat("x", 200)
	var err error
	for id := int64(0); id < 10_000 && err == nil; id++ {
		_, err = db.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: name})
	}
	if plantstore.ErrorCode(err) != plantstore.EINSUFFICIENT {
		t.Fatalf("filling the store ended with %v, want %s", err, plantstore.EINSUFFICIENT)
	}
	if _, err := db.GetPlant(context.Background(), 0); err != nil {
		t.Errorf("a read on a full store: %v", err)
	}
}
