package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

func runEvents(t *testing.T, open func(t *testing.T) plantstore.Store) {
	t.Run("EventsOfEachChange", func(t *testing.T) { testEventsOfEachChange(t, open(t)) })
	t.Run("EventPages", func(t *testing.T) { testEventPages(t, open(t)) })
	t.Run("EventsInCommitOrder", func(t *testing.T) { testEventsInCommitOrder(t, open(t)) })
	t.Run("EventPruning", func(t *testing.T) { testEventPruning(t, open(t)) })
}

// allEvents reads the whole feed after after, a page at a time.
func allEvents(t *testing.T, s plantstore.Store, after int64, types ...string) []plantstore.Event {
	t.Helper()
	var all []plantstore.Event
	for {
		page, err := s.Events(context.Background(), plantstore.EventQuery{After: after, Limit: 7, Types: types})
		if err != nil {
			t.Fatalf("Events(after %d): %v", after, err)
		}
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
		after = page[len(page)-1].ID
	}
}

// eventSummary is an event without its id and time, to compare.
func eventSummary(e plantstore.Event) string {
	tag := "<none>"
	if e.Plant.Tag != nil {
		tag = fmt.Sprintf("%q", *e.Plant.Tag)
	}
	return fmt.Sprintf("%s %d %q %s", e.Type, e.Plant.ID, e.Plant.Name, tag)
}

func testEventsOfEachChange(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	if id, err := s.LatestEventID(ctx); err != nil || id != 0 {
		t.Fatalf("LatestEventID of a new store = %d, %v; want 0", id, err)
	}
	if got := allEvents(t, s, 0); len(got) != 0 {
		t.Fatalf("a new store has events: %v", got)
	}
	before := time.Now().Add(-time.Second)
	fails := func(plantstore.Plant) bool { return false }
	holds := func(plantstore.Plant) bool { return true }
	steps := []struct {
		what string
		do   func() error
		want string // the event the step records, "" for none
		code string // the error code the step answers, "" for none
	}{
		{"create 1", func() error {
			_, err := s.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "Fern", Tag: ptr("shade")})
			return err
		},
			`plant.created 1 "Fern" "shade"`, ""},
		{"create 2", func() error { _, err := s.CreatePlant(ctx, plantstore.Plant{ID: 2, Name: "Aloe"}); return err },
			`plant.created 2 "Aloe" <none>`, ""},
		{"replay create 1", func() error {
			_, err := s.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "Fern", Tag: ptr("shade")})
			return err
		},
			"", ""},
		{"conflicting create 1", func() error { _, err := s.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "Other"}); return err },
			"", plantstore.ECONFLICT},
		{"update 2", func() error { return s.UpdatePlant(ctx, plantstore.Plant{ID: 2, Name: "Aloe vera", Tag: ptr("")}, nil) },
			`plant.updated 2 "Aloe vera" ""`, ""},
		{"update 2 to what it is", func() error { return s.UpdatePlant(ctx, plantstore.Plant{ID: 2, Name: "Aloe vera", Tag: ptr("")}, nil) },
			"", ""},
		{"update 2's tag from empty to none", func() error { return s.UpdatePlant(ctx, plantstore.Plant{ID: 2, Name: "Aloe vera"}, nil) },
			`plant.updated 2 "Aloe vera" <none>`, ""},
		{"update missing 9", func() error { return s.UpdatePlant(ctx, plantstore.Plant{ID: 9, Name: "x"}, nil) },
			"", plantstore.ENOTFOUND},
		{"refused conditional update of 1", func() error { return s.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "x"}, fails) },
			"", plantstore.EPRECONDITION},
		{"conditional update of 1 to what it is", func() error {
			return s.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "Fern", Tag: ptr("shade")}, holds)
		}, "", ""},
		{"conditional update of 1", func() error { return s.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "Fern", Tag: ptr("sun")}, holds) },
			`plant.updated 1 "Fern" "sun"`, ""},
		{"refused conditional delete of 1", func() error { return s.DeletePlant(ctx, 1, fails) },
			"", plantstore.EPRECONDITION},
		{"delete 1", func() error { return s.DeletePlant(ctx, 1, nil) },
			`plant.deleted 1 "Fern" "sun"`, ""},
		{"delete 1 again", func() error { return s.DeletePlant(ctx, 1, nil) },
			"", plantstore.ENOTFOUND},
		{"create 1 anew", func() error { _, err := s.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "Ivy"}); return err },
			`plant.created 1 "Ivy" <none>`, ""},
		{"conditional delete of 2", func() error { return s.DeletePlant(ctx, 2, holds) },
			`plant.deleted 2 "Aloe vera" <none>`, ""},
	}
	var want []string
	for _, step := range steps {
		if err := step.do(); string(plantstore.ErrorCode(err)) != step.code {
			t.Fatalf("%s: %v, want code %q", step.what, err, step.code)
		}
		if step.want != "" {
			want = append(want, step.want)
		}
		got := allEvents(t, s, 0)
		var summaries []string
		for _, e := range got {
			summaries = append(summaries, eventSummary(e))
		}
		if !slices.Equal(summaries, want) {
			t.Fatalf("after %s, the feed is\n%v\nwant\n%v", step.what, summaries, want)
		}
	}
	got := allEvents(t, s, 0)
	for i, e := range got {
		if i > 0 && e.ID <= got[i-1].ID {
			t.Errorf("event ids not increasing: %d after %d", e.ID, got[i-1].ID)
		}
		if e.At.Before(before) || e.At.After(time.Now().Add(time.Second)) {
			t.Errorf("event %d at %v, not about now", e.ID, e.At)
		}
	}
	if latest, err := s.LatestEventID(ctx); err != nil || latest != got[len(got)-1].ID {
		t.Errorf("LatestEventID = %d, %v; want %d", latest, err, got[len(got)-1].ID)
	}
	// After the middle event, only the later ones.
	mid := got[len(got)/2].ID
	if later := allEvents(t, s, mid); len(later) != len(got)-len(got)/2-1 || later[0].ID <= mid {
		t.Errorf("events after %d: %v", mid, later)
	}
}

func testEventPages(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	for id := int64(1); id <= 10; id++ {
		if _, err := s.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	for id := int64(1); id <= 10; id += 3 {
		if err := s.UpdatePlant(ctx, plantstore.Plant{ID: id, Name: "q"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeletePlant(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	page, err := s.Events(ctx, plantstore.EventQuery{Limit: 4})
	if err != nil || len(page) != 4 {
		t.Fatalf("a page of 4: %d events, %v", len(page), err)
	}
	if all := allEvents(t, s, 0); len(all) != 15 {
		t.Errorf("%d events, want 10 creates, 4 updates and a delete", len(all))
	}
	counts := map[string]int{}
	for _, types := range [][]string{{plantstore.EventUpdated}, {plantstore.EventDeleted}, {plantstore.EventCreated, plantstore.EventDeleted}} {
		for _, e := range allEvents(t, s, 0, types...) {
			if !slices.Contains(types, e.Type) {
				t.Errorf("asked for %v, got a %s", types, e.Type)
			}
			counts[fmt.Sprint(types)]++
		}
	}
	if counts["[plant.updated]"] != 4 || counts["[plant.deleted]"] != 1 || counts["[plant.created plant.deleted]"] != 11 {
		t.Errorf("filtered counts: %v", counts)
	}
	for _, limit := range []int{0, -1} {
		if _, err := s.Events(ctx, plantstore.EventQuery{Limit: limit}); plantstore.ErrorCode(err) != plantstore.EINVALID {
			t.Errorf("limit %d: %v, want %s", limit, err, plantstore.EINVALID)
		}
	}
	if page, err := s.Events(ctx, plantstore.EventQuery{FromOldest: true, Limit: 3}); err != nil || len(page) != 3 || page[0].Type != plantstore.EventCreated || page[0].Plant.ID != 1 {
		t.Errorf("the oldest 3, none pruned: %v, %v", page, err)
	}
	// Ids are never reused: a position after the newest comes from a store
	// that went back (restored from a backup), and the client resyncs.
	latest, err := s.LatestEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if page, err := s.Events(ctx, plantstore.EventQuery{After: latest, Limit: 10}); err != nil || len(page) != 0 {
		t.Errorf("after the newest: %v, %v; want an empty page", page, err)
	}
	for _, after := range []int64{latest + 1, 1 << 62} {
		if page, err := s.Events(ctx, plantstore.EventQuery{After: after, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EGONE {
			t.Errorf("after %d, an id not yet given (the newest: %d): %v, %v; want %s", after, latest, page, err, plantstore.EGONE)
		}
	}
}

// testEventsInCommitOrder has writers create, update and delete
// concurrently while a follower reads the feed as it grows. Event ids
// come without holes (a write that fails records nothing and takes no
// id), so a follower that ever finds an event whose id is not one more
// than the last it read has seen a later event become visible before an
// earlier one: exactly what a feed that gave out ids before commit order
// would show under concurrent writers.
func testEventsInCommitOrder(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	const writers, perWriter = 8, 60
	var wg sync.WaitGroup
	done := make(chan struct{})
	var followErr error
	var followed []plantstore.Event
	wg.Go(func() {
		var after int64
		for finished := false; ; {
			select {
			case <-done:
				finished = true
			default:
			}
			page, err := s.Events(ctx, plantstore.EventQuery{After: after, Limit: 50})
			if err != nil {
				followErr = err
				return
			}
			for _, e := range page {
				if e.ID != after+1 {
					followErr = fmt.Errorf("after event %d the follower read event %d: an earlier one was not yet visible", after, e.ID)
					return
				}
				after = e.ID
				followed = append(followed, e)
			}
			if finished && len(page) == 0 {
				return
			}
		}
	})
	var writeWG sync.WaitGroup
	for w := range writers {
		writeWG.Go(func() {
			for i := range perWriter {
				id := int64(w*perWriter + i + 1)
				if _, err := s.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "n"}); err != nil {
					t.Error(err)
					return
				}
				switch i % 3 {
				case 1:
					if err := s.UpdatePlant(ctx, plantstore.Plant{ID: id, Name: "renamed"}, nil); err != nil {
						t.Error(err)
						return
					}
				case 2:
					if err := s.DeletePlant(ctx, id, nil); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	writeWG.Wait()
	close(done)
	wg.Wait()
	if followErr != nil {
		t.Fatal(followErr)
	}
	want := writers * (perWriter + perWriter/3*2)
	if len(followed) != want {
		t.Fatalf("the follower read %d events, want %d", len(followed), want)
	}
	// Each plant's own events are in the order its writer made them.
	last := map[int64]string{}
	for _, e := range followed {
		prev := last[e.Plant.ID]
		ok := (prev == "" && e.Type == plantstore.EventCreated) ||
			(prev == plantstore.EventCreated && e.Type != plantstore.EventCreated)
		if !ok {
			t.Fatalf("plant %d: %s after %q", e.Plant.ID, e.Type, prev)
		}
		last[e.Plant.ID] = e.Type
	}
}

func testEventPruning(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	for id := int64(1); id <= 5; id++ {
		if _, err := s.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "old"}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // the stores keep milliseconds
	for id := int64(6); id <= 8; id++ {
		if _, err := s.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "new"}); err != nil {
			t.Fatal(err)
		}
	}
	all := allEvents(t, s, 0)
	if len(all) != 8 {
		t.Fatalf("%d events, want 8", len(all))
	}
	cutoff := all[5].At // the first new one's time: the old ones are before it
	n, err := s.PruneEvents(ctx, cutoff)
	if err != nil || n != 5 {
		t.Fatalf("PruneEvents = %d, %v; want 5 pruned", n, err)
	}
	if n, err := s.PruneEvents(ctx, cutoff); err != nil || n != 0 {
		t.Errorf("pruning again = %d, %v; want 0", n, err)
	}
	for _, after := range []int64{0, all[0].ID, all[3].ID} {
		if _, err := s.Events(ctx, plantstore.EventQuery{After: after, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EGONE {
			t.Errorf("events after %d, some pruned: %v, want %s", after, err, plantstore.EGONE)
		}
	}
	kept, err := s.Events(ctx, plantstore.EventQuery{After: all[4].ID, Limit: 10})
	if err != nil || len(kept) != 3 || kept[0].ID != all[5].ID {
		t.Errorf("events after the last pruned: %v, %v; want the 3 kept", kept, err)
	}
	oldest, err := s.Events(ctx, plantstore.EventQuery{FromOldest: true, Limit: 2})
	if err != nil || len(oldest) != 2 || oldest[0].ID != all[5].ID {
		t.Errorf("the oldest kept: %v, %v; want the first 2 of the 3 kept", oldest, err)
	}
	if n, err := s.PruneEvents(ctx, time.Now().Add(time.Hour)); err != nil || n != 3 {
		t.Errorf("pruning the rest = %d, %v; want 3", n, err)
	}
	// With every event pruned, the ids go on from where they were.
	if latest, err := s.LatestEventID(ctx); err != nil || latest != all[7].ID {
		t.Errorf("LatestEventID after pruning all = %d, %v; want %d", latest, err, all[7].ID)
	}
	if page, err := s.Events(ctx, plantstore.EventQuery{After: all[7].ID, Limit: 10}); err != nil || len(page) != 0 {
		t.Errorf("events after the newest, all pruned: %v, %v; want none, no error", page, err)
	}
	if _, err := s.CreatePlant(ctx, plantstore.Plant{ID: 100, Name: "later"}); err != nil {
		t.Fatal(err)
	}
	if page := allEvents(t, s, all[7].ID); len(page) != 1 || page[0].ID <= all[7].ID {
		t.Errorf("the event after pruning all: %v, want one with an id above %d", page, all[7].ID)
	}
}

// FeedGoesOnAfter checks a store upgraded again after its change feed was
// undone by hand when its newest event was latest (docs/upgrades.md): a
// client that followed the feed to latest gets EGONE, as the changes made
// meanwhile have no events, and the next change gets an id past latest+1,
// not one a client saw for another change.
func FeedGoesOnAfter(t *testing.T, s plantstore.Store, latest int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.CreatePlant(ctx, plantstore.Plant{ID: 1001, Name: "Written after the upgrade again"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events(ctx, plantstore.EventQuery{After: latest, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EGONE {
		t.Errorf("following on from event %d, the newest before the feed was undone: %v, want EGONE", latest, err)
	}
	if now, err := s.LatestEventID(ctx); err != nil || now <= latest+1 {
		t.Errorf("the newest event after the upgrade again: %d, %v; want past %d, the id after the last given", now, err, latest+1)
	}
}
