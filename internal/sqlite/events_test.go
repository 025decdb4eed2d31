package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

// TestFeedOfManyBatches writes more events than one prune transaction
// takes, in batches of whatever size concurrent writers make, and reads
// the feed back in pages that start and end inside batches, by type, and
// after pruning in several transactions.
func TestFeedOfManyBatches(t *testing.T) {
	ctx := context.Background()
	var clock atomic.Int64
	start := time.Now().Truncate(time.Millisecond)
	clock.Store(start.UnixNano())
	db, err := Open(ctx, filepath.Join(t.TempDir(), "feed.db"), Options{Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	const creates = 2*pruneChunk + 300
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 48 {
		wg.Go(func() {
			for {
				id := next.Add(1)
				if id > creates {
					return
				}
				if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: fmt.Sprint("plant ", id)}); err != nil {
					t.Error(err)
					return
				}
				if id%10 == 0 {
					if err := db.DeletePlant(ctx, id, nil); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	var batches int
	if err := db.read.QueryRowContext(ctx, `SELECT count(*) FROM event_batches`).Scan(&batches); err != nil || batches < 4 {
		t.Fatalf("%d event batches, %v; want several", batches, err)
	}
	total := int64(creates + creates/10)

	// Pages of 7, by id: every id once, in order, each plant created
	// before it is deleted.
	created := map[int64]bool{}
	var after, seen int64
	for {
		page, err := db.Events(ctx, plantstore.EventQuery{After: after, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			if e.ID != after+1 {
				t.Fatalf("event %d after %d: want ids without a gap", e.ID, after)
			}
			after = e.ID
			switch e.Type {
			case plantstore.EventCreated:
				created[e.Plant.ID] = true
			case plantstore.EventDeleted:
				if !created[e.Plant.ID] {
					t.Errorf("event %d deletes plant %d before its create", e.ID, e.Plant.ID)
				}
			}
			if !e.At.Equal(start) {
				t.Errorf("event %d at %v, want %v", e.ID, e.At, start)
			}
			seen++
		}
		if len(page) < 7 {
			break
		}
	}
	if seen != total || len(created) != creates {
		t.Fatalf("%d events for %d plants, want %d for %d", seen, len(created), total, creates)
	}
	deletes, err := db.Events(ctx, plantstore.EventQuery{After: 5, Limit: 1000, Types: []string{plantstore.EventDeleted}})
	if err != nil || len(deletes) != creates/10 {
		t.Fatalf("the deletes: %d, %v; want %d", len(deletes), err, creates/10)
	}
	for i, e := range deletes {
		if e.Type != plantstore.EventDeleted || e.Plant.ID%10 != 0 || (i > 0 && e.ID <= deletes[i-1].ID) {
			t.Fatalf("delete %d is %+v", i, e)
		}
	}

	// Later events, then a prune of the earlier ones: several
	// transactions, whole batches.
	clock.Store(start.Add(time.Hour).UnixNano())
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: creates + 1, Name: "later"}); err != nil {
		t.Fatal(err)
	}
	n, err := db.PruneEvents(ctx, start.Add(time.Minute))
	if err != nil || int64(n) != total {
		t.Fatalf("PruneEvents = %d, %v; want %d", n, err, total)
	}
	left, err := db.Events(ctx, plantstore.EventQuery{FromOldest: true, Limit: 10})
	if err != nil || len(left) != 1 || left[0].ID != total+1 || left[0].Plant.ID != creates+1 {
		t.Fatalf("after the prune: %+v, %v; want the later create alone, id %d", left, err, total+1)
	}
	if _, err := db.Events(ctx, plantstore.EventQuery{After: total - 1, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EGONE {
		t.Errorf("Events after a pruned id: %v, want EGONE", err)
	}

	// Every event pruned: the ids go on from the last one given.
	if n, err := db.PruneEvents(ctx, start.Add(2*time.Hour)); err != nil || n != 1 {
		t.Fatalf("PruneEvents of the rest = %d, %v; want 1", n, err)
	}
	if id, err := db.LatestEventID(ctx); err != nil || id != total+1 {
		t.Errorf("LatestEventID with every event pruned = %d, %v; want %d", id, err, total+1)
	}
	if err := db.UpdatePlant(ctx, plantstore.Plant{ID: creates + 1, Name: "renamed"}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := db.Events(ctx, plantstore.EventQuery{After: total + 1, Limit: 10}); err != nil || len(got) != 1 || got[0].ID != total+2 {
		t.Errorf("the next event: %+v, %v; want id %d", got, err, total+2)
	}
}
