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
