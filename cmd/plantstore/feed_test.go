package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
)

// On PostgreSQL too, a SIGKILL loses no event of a write: two instances
// create, update and delete plants side by side while one of them is
// killed again and again; then the feed, replayed, is exactly the plants
// stored, and every acknowledged create has its event. (On SQLite,
// TestCrashKeepsEveryAcknowledgedWrite checks its feed the same way.)
func TestCrashOnPostgresKeepsTheFeedWhole(t *testing.T) {
	url := pgtest.NewDatabase(t)
	dir := t.TempDir()
	token := mustToken(t, dir, "--db", url, "--name", "crash")
	steady := serveProcess(t, dir, "--db", url)
	client := &http.Client{Timeout: 10 * time.Second}
	var mu sync.Mutex
	acked := map[int64]bool{}
	write := func(ctx context.Context, base string, w int, round int) {
		rng := rand.New(rand.NewPCG(uint64(w), uint64(round)))
		for i := int64(0); ctx.Err() == nil; i++ {
			id := int64(round)<<40 | int64(w)<<32 | i/3
			method, path, body := "POST", "/plants", fmt.Sprintf(`{"id":%d,"name":"p%d"}`, id, rng.IntN(3))
			switch i % 3 {
			case 1:
				method, path, body = "PUT", fmt.Sprintf("/plants/%d", id), fmt.Sprintf(`{"name":"p%d"}`, rng.IntN(3))
			case 2:
				if rng.IntN(2) == 0 {
					method, path, body = "DELETE", fmt.Sprintf("/plants/%d", id), ""
				}
			}
			req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return // the server is gone
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if method == "POST" && resp.StatusCode == 200 {
				mu.Lock()
				acked[id] = true
				mu.Unlock()
			}
		}
	}
	for round := range 3 {
		victim := serveProcess(t, dir, "--db", url)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 8 {
			base := []string{victim.url, steady.url}[w%2]
			wg.Go(func() { write(ctx, base, w, round) })
		}
		runUntil(time.Duration(400+round*300)*time.Millisecond, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acked) >= (round+1)*50
		})
		victim.kill(t)
		cancel()
		wg.Wait()
	}
	if len(acked) < 100 {
		t.Fatalf("only %d creates were acknowledged; the test proves little", len(acked))
	}
	db, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	created := checkFeedReplays(t, db)
	for id := range acked {
		if !created[id] {
			t.Errorf("plant %d's create was acknowledged; the feed has no plant.created of it", id)
		}
	}
}

// checkFeedReplays reads the store's whole change feed and applies it, in
// order, to nothing: each create must find its plant absent, each update
// and delete present, and the result must be the plants stored, exactly.
// A committed change without its event, an event of a change that did not
// commit, or events out of order would each break one of these. Event ids
// must follow each other without a hole, as nothing was pruned.
// It returns the plants with a plant.created event.
func checkFeedReplays(t *testing.T, s plantstore.Store) (created map[int64]bool) {
	t.Helper()
	ctx := context.Background()
	created = map[int64]bool{}
	replayed := map[int64]plantstore.Plant{}
	var last int64
	events := 0
	for {
		page, err := s.Events(ctx, plantstore.EventQuery{After: last, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			if e.ID != last+1 {
				t.Fatalf("event %d follows %d", e.ID, last)
			}
			last = e.ID
			events++
			_, present := replayed[e.Plant.ID]
			if present == (e.Type == plantstore.EventCreated) {
				t.Errorf("event %d, %s of plant %d, when the feed so far has it present: %v", e.ID, e.Type, e.Plant.ID, present)
			}
			if e.Type == plantstore.EventCreated {
				created[e.Plant.ID] = true
			}
			switch e.Type {
			case plantstore.EventCreated, plantstore.EventUpdated:
				replayed[e.Plant.ID] = e.Plant
			case plantstore.EventDeleted:
				delete(replayed, e.Plant.ID)
			}
		}
	}
	stored := map[int64]plantstore.Plant{}
	var after *int64
	for {
		page, err := s.ListPlants(ctx, plantstore.ListOptions{Limit: 1000, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page {
			stored[p.ID] = p
		}
		if len(page) < 1000 {
			break
		}
		after = &page[len(page)-1].ID
	}
	if len(replayed) != len(stored) {
		t.Errorf("the feed's %d events replay to %d plants; %d are stored", events, len(replayed), len(stored))
	}
	for id, p := range stored {
		if r, ok := replayed[id]; !ok || !r.SameContent(p) {
			t.Errorf("plant %d is stored as %v; the feed replays to %v (present %v)", id, p, r, ok)
		}
	}
	t.Logf("the feed's %d events replay to the %d plants stored", events, len(stored))
	return created
}
