package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

// After checkpointEvery batches, far fewer WAL pages than the 1,000 at
// which the writer's own autocheckpoint would copy them, the checkpointer
// has copied the whole WAL: the database file read without its WAL holds
// every plant.
func TestCheckpointerCopiesTheWAL(t *testing.T) {
	db, path := openTest(t, Options{})
	if db.checkpoints == nil {
		t.Fatal("no checkpointer")
	}
	results := make(chan checkpointResult, 10)
	db.checkpoints.checkpointed = func(r checkpointResult) { results <- r }
	ctx := context.Background()
	for i := range checkpointEvery {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: int64(i), Name: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case r := <-results:
		if r.err != nil || r.busy || r.log == 0 || r.copied != r.log {
			t.Fatalf("checkpoint: busy %v, %d of %d frames copied, err %v; want every frame copied", r.busy, r.copied, r.log, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no checkpoint after %d batches", checkpointEvery)
	}

	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	alone := filepath.Join(t.TempDir(), "alone.db")
	if err := os.WriteFile(alone, content, 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := sql.Open("sqlite", dsn(alone, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var n int
	if err := file.QueryRow(`SELECT count(*) FROM plants`).Scan(&n); err != nil || n != checkpointEvery {
		t.Fatalf("the database file without its WAL holds %d plants (%v), want %d", n, err, checkpointEvery)
	}
}

// Close waits for a checkpoint under way and closes its connection; the
// store opens again with every plant.
func TestCloseStopsTheCheckpointer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plants.db")
	ctx := context.Background()
	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 100)
	db.checkpoints.checkpointed = func(checkpointResult) { started <- struct{}{} }
	const plants = 5 * checkpointEvery
	for i := range plants {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: int64(i), Name: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-db.checkpoints.done:
	default:
		t.Fatal("Close returned with the checkpointer running")
	}
	if len(started) == 0 {
		t.Fatal("no checkpoint ran")
	}
	db, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	page, err := db.ListPlants(ctx, plantstore.ListOptions{Limit: plants + 1})
	if err != nil || len(page) != plants {
		t.Fatalf("%d plants after reopening (%v), want %d", len(page), err, plants)
	}
}
