package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

// TestOutboxInBatches writes creates, updates and deletes from many
// goroutines at once, so that group commit gathers them into batches of
// every size, for two subscribers of different event types: each gets a
// delivery for each event of its types, once, in the feed's order, with
// the event's feed id, and the two share each event's webhook-id.
func TestOutboxInBatches(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	created, err := db.AddSubscriber(ctx, "https://created.example/", secret)
	if err != nil {
		t.Fatal(err)
	}
	every, err := db.AddSubscriberFor(ctx, "https://every.example/", secret,
		[]string{plantstore.EventCreated, plantstore.EventUpdated, plantstore.EventDeleted})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			id := int64(i + 1)
			_, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: fmt.Sprint("plant ", id)})
			if err != nil {
				t.Error(err)
				return
			}
			switch i % 3 {
			case 1:
				err = db.UpdatePlant(ctx, plantstore.Plant{ID: id, Name: "renamed"}, nil)
			case 2:
				err = db.DeletePlant(ctx, id, nil)
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	events, err := db.Events(ctx, plantstore.EventQuery{Limit: 1000})
	if err != nil || len(events) != 500 {
		t.Fatalf("Events: %d, %v; want 500", len(events), err)
	}
	ids := map[int64]string{} // feed id: webhook-id
	for _, sub := range []plantstore.Subscriber{created, every} {
		ds, err := db.DueDeliveries(ctx, sub.ID, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var want []plantstore.Event
		for _, e := range events {
			if sub.ID == every.ID || e.Type == plantstore.EventCreated {
				want = append(want, e)
			}
		}
		if len(ds) != len(want) {
			t.Fatalf("subscriber %d: %d deliveries, want %d", sub.ID, len(ds), len(want))
		}
		for i, d := range ds {
			e := want[i]
			if d.Seq != e.ID || d.EventType != e.Type || d.Plant.ID != e.Plant.ID || d.Plant.Name != e.Plant.Name {
				t.Fatalf("subscriber %d, delivery %d: %s of plant %d %q, feed id %d; want %s of plant %d %q, feed id %d",
					sub.ID, i, d.EventType, d.Plant.ID, d.Plant.Name, d.Seq, e.Type, e.Plant.ID, e.Plant.Name, e.ID)
			}
			if id, ok := ids[d.Seq]; ok && id != d.EventID {
				t.Errorf("event %d has webhook-id %s for one subscriber and %s for another", d.Seq, id, d.EventID)
			}
			ids[d.Seq] = d.EventID
		}
	}
	if len(ids) != 500 {
		t.Errorf("%d distinct events delivered, want 500", len(ids))
	}
}

// BenchmarkCreateSubscribed creates distinct plants from 64 goroutines,
// with group commit, with no webhook subscriber and with one: the
// difference is what the outbox rows cost a create.
func BenchmarkCreateSubscribed(b *testing.B) {
	for _, subscribers := range []int{0, 1} {
		b.Run(map[int]string{0: "none", 1: "one"}[subscribers], func(b *testing.B) {
			db, err := Open(context.Background(), filepath.Join(b.TempDir(), "create.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			for range subscribers {
				if _, err := db.AddSubscriber(context.Background(), "https://hooks.example.com/", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"); err != nil {
					b.Fatal(err)
				}
			}
			createInParallel(b, db, 64)
		})
	}
}

// TestOutboxFromTheFeed: a change writes no webhook delivery; the
// deliveries of its event are written by the dispatcher's read
// (DueDeliveries), and meanwhile the counts include them, the events are
// not pruned, and a subscriber disabled gets them as failed.
func TestOutboxFromTheFeed(t *testing.T) {
	ctx := context.Background()
	clock := time.Now()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "feed.db"), Options{Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "before any subscriber"}); err != nil {
		t.Fatal(err)
	}
	sub, err := db.AddSubscriber(ctx, "https://one.example/", secret)
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(2); id <= 4; id++ {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: fmt.Sprint("plant ", id)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.UpdatePlant(ctx, plantstore.Plant{ID: 2, Name: "renamed"}, nil); err != nil {
		t.Fatal(err)
	}
	rows := func() (n int) {
		t.Helper()
		if err := db.read.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rows(); n != 0 {
		t.Errorf("%d webhook_deliveries rows after the writes, want none: the feed is the outbox", n)
	}
	if c, err := db.CountDeliveries(ctx); err != nil || c.Pending != 3 {
		t.Errorf("CountDeliveries = %+v, %v; want the 3 creates after the subscriber pending", c, err)
	}
	if subs, err := db.Subscribers(ctx); err != nil || len(subs) != 1 || subs[0].Pending != 3 {
		t.Errorf("Subscribers = %+v, %v; want one with 3 pending", subs, err)
	}
	claimed, err := db.ClaimSubscribers(ctx, "owner", time.Minute, 10)
	if err != nil || len(claimed) != 1 || claimed[0].ID != sub.ID {
		t.Fatalf("ClaimSubscribers = %+v, %v; want the subscriber, whose events wait in the feed", claimed, err)
	}
	// Retention writes the deliveries of the events it takes first: a
	// subscriber whose receiver is down, whose deliveries are not read,
	// holds no event past it.
	if n, err := db.PruneEvents(ctx, clock.Add(time.Hour)); err != nil || n != 5 {
		t.Errorf("PruneEvents = %d, %v; want all 5 events", n, err)
	}
	if n := rows(); n != 3 {
		t.Errorf("%d webhook_deliveries rows after the prune, want 3 (the update is not the subscriber's)", n)
	}
	if c, err := db.CountDeliveries(ctx); err != nil || c.Pending != 3 {
		t.Errorf("CountDeliveries after the prune = %+v, %v; want the same 3 pending", c, err)
	}
	ds, err := db.DueDeliveries(ctx, sub.ID, 2)
	if err != nil || len(ds) != 2 || ds[0].Plant.ID != 2 || ds[1].Plant.ID != 3 || ds[0].Plant.Name != "plant 2" {
		t.Fatalf("DueDeliveries(2) = %+v, %v; want the creates of 2 and 3, as created", ds, err)
	}
	// A subscriber disabled fails its events not yet copied too.
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 5, Name: "plant 5"}); err != nil {
		t.Fatal(err)
	}
	if err := db.DisableSubscriber(ctx, sub.ID, "410 Gone"); err != nil {
		t.Fatal(err)
	}
	if c, err := db.CountDeliveries(ctx); err != nil || c.Pending != 0 || c.Failed != 4 {
		t.Errorf("CountDeliveries after the disable = %+v, %v; want 4 failed, none pending", c, err)
	}
}

// Pruning copies what it prunes, keeps the events after the cutoff in the
// feed, and every event reaches the subscriber once, in order.
func TestPruneCopiesWhatItPrunes(t *testing.T) {
	ctx := context.Background()
	clock := time.Now()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "prune.db"), Options{Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sub, err := db.AddSubscriber(ctx, "https://down.example/", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 6; id++ {
		if id == 4 {
			clock = clock.Add(2 * time.Hour)
		}
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: fmt.Sprint("plant ", id)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := db.PruneEvents(ctx, clock.Add(-time.Hour)); err != nil || n != 3 {
		t.Fatalf("PruneEvents = %d, %v; want the 3 events before the cutoff", n, err)
	}
	page, err := db.Events(ctx, plantstore.EventQuery{After: 3, Limit: 10})
	if err != nil || len(page) != 3 || page[0].Plant.ID != 4 {
		t.Fatalf("the feed after the prune: %+v, %v; want plants 4 to 6", page, err)
	}
	ds, err := db.DueDeliveries(ctx, sub.ID, 100)
	var got []int64
	for _, d := range ds {
		got = append(got, d.Plant.ID)
	}
	if err != nil || fmt.Sprint(got) != "[1 2 3 4 5 6]" {
		t.Errorf("deliveries due = %v, %v; want every plant once, in order", got, err)
	}
}

// TestOutboxBacklogInWindows drains a backlog of several copies' worth of
// events in windows, as the dispatcher does: every event once, in order.
func TestOutboxBacklogInWindows(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "backlog.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sub, err := db.AddSubscriber(ctx, "https://backlog.example/", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	const backlog = 2*outboxChunk + 100
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for id := int64(w); id < backlog; id += 8 {
				if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "p"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var last int64
	seen := 0
	for seen < backlog {
		ds, err := db.DueDeliveries(ctx, sub.ID, 300)
		if err != nil || len(ds) == 0 {
			t.Fatalf("DueDeliveries after %d: %d, %v", seen, len(ds), err)
		}
		results := make([]plantstore.AttemptResult, len(ds))
		for i, d := range ds {
			if d.Seq <= last {
				t.Fatalf("event %d after %d", d.Seq, last)
			}
			last = d.Seq
			results[i] = plantstore.AttemptResult{DeliveryID: d.ID, Delivered: true}
		}
		if _, err := db.RecordAttempts(ctx, "owner", sub.ID, results, time.Minute, false); err != nil {
			t.Fatal(err)
		}
		seen += len(ds)
	}
	if c, err := db.CountDeliveries(ctx); err != nil || c.Pending != 0 || c.Delivered != backlog {
		t.Errorf("CountDeliveries = %+v, %v; want %d delivered, none pending", c, err, backlog)
	}
}
