package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
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
	createOneAtATime(t, db, checkpointEvery)
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
	createOneAtATime(t, db, plants)
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

// A checkpoint whose sync of the database file failed stops the store as
// a failed sync of the WAL does: the next create answers EUNAVAILABLE,
// and so does Ping (so /readyz), and the log says to restart. Any other
// error leaves the store serving.
func TestFailedCheckpointSync(t *testing.T) {
	for _, tc := range []struct {
		name    string
		result  checkpointResult
		stopped bool
		level   string
	}{
		{"sync", checkpointResult{err: errors.New("disk I/O error"), syncFailed: true}, true, "ERROR"},
		{"other", checkpointResult{err: errors.New("database or disk is full")}, false, "WARN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &apitest.Buffer{}
			db, _ := openTest(t, Options{Logger: slog.New(slog.NewTextHandler(log, nil))})
			checkpointWith(t, db, tc.result)
			ctx := context.Background()
			_, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1000, Name: "after"})
			if tc.stopped {
				if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
					t.Errorf("a create after the failed sync: %v, want EUNAVAILABLE", err)
				}
				if err := db.Ping(ctx); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
					t.Errorf("Ping after the failed sync: %v, want EUNAVAILABLE", err)
				}
			} else if err != nil {
				t.Errorf("a create after a failed checkpoint: %v", err)
			}
			if line := log.String(); !strings.Contains(line, "level="+tc.level) || !strings.Contains(line, "checkpoint") {
				t.Errorf("the log: %q; want a %s line about the checkpoint", line, tc.level)
			}
		})
	}
}

// createOneAtATime creates plants 0 to n-1, each waiting for the last: n
// batches of the writer's.
func createOneAtATime(t *testing.T, db *DB, n int) {
	t.Helper()
	for i := range n {
		if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: int64(i), Name: "p"}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkpointWith has the store's next checkpoint answer result, and
// creates plants until it has.
func checkpointWith(t *testing.T, db *DB, result checkpointResult) {
	t.Helper()
	ran := make(chan struct{}, 10)
	db.checkpoints.run = func() checkpointResult { return result }
	db.checkpoints.checkpointed = func(checkpointResult) { ran <- struct{}{} }
	createOneAtATime(t, db, checkpointEvery)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint ran")
	}
}
