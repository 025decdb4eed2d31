package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

func runWebhooks(t *testing.T, open func(t *testing.T) plantstore.Store) {
	t.Run("OutboxFollowsCreates", func(t *testing.T) { testOutboxFollowsCreates(t, open(t)) })
	t.Run("OutboxUnderConcurrentCreates", func(t *testing.T) { testOutboxConcurrent(t, open(t)) })
	t.Run("LeaseIsExclusive", func(t *testing.T) { testLeaseIsExclusive(t, open(t)) })
	t.Run("DeliveryLifecycle", func(t *testing.T) { testDeliveryLifecycle(t, open(t)) })
	t.Run("DisableAndRemove", func(t *testing.T) { testDisableAndRemove(t, open(t)) })
	t.Run("LastError", func(t *testing.T) { testLastError(t, open(t)) })
}

const testSecret = "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q="

func mustAddSubscriber(t *testing.T, s plantstore.Store, url string) plantstore.Subscriber {
	t.Helper()
	sub, err := s.AddSubscriber(context.Background(), url, testSecret)
	if err != nil {
		t.Fatalf("AddSubscriber(%s): %v", url, err)
	}
	if sub.ID == 0 || sub.URL != url || sub.Secret != testSecret || sub.CreatedAt.IsZero() {
		t.Fatalf("AddSubscriber returned %+v", sub)
	}
	return sub
}

func mustCreate(t *testing.T, s plantstore.Store, p plantstore.Plant) {
	t.Helper()
	if _, err := s.CreatePlant(context.Background(), p); err != nil {
		t.Fatalf("CreatePlant(%v): %v", p, err)
	}
}

// subscriberByID finds one subscriber in the listing.
func subscriberByID(t *testing.T, s plantstore.Store, id int64) plantstore.Subscriber {
	t.Helper()
	subs, err := s.Subscribers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range subs {
		if sub.Secret != "" {
			t.Errorf("Subscribers lists subscriber %d's secret", sub.ID)
		}
		if sub.ID == id {
			return sub
		}
	}
	t.Fatalf("subscriber %d not listed in %+v", id, subs)
	return plantstore.Subscriber{}
}

// claimOne claims as owner and expects exactly the subscriber want (0: none).
func claimOne(t *testing.T, s plantstore.Store, owner string, lease time.Duration, want int64) plantstore.Subscriber {
	t.Helper()
	subs, err := s.ClaimSubscribers(context.Background(), owner, lease, 10)
	if err != nil {
		t.Fatalf("%s: ClaimSubscribers: %v", owner, err)
	}
	if want == 0 {
		if len(subs) != 0 {
			t.Fatalf("%s claimed %+v, want none", owner, subs)
		}
		return plantstore.Subscriber{}
	}
	if len(subs) != 1 || subs[0].ID != want {
		t.Fatalf("%s claimed %+v, want subscriber %d alone", owner, subs, want)
	}
	if subs[0].Secret != testSecret {
		t.Fatalf("a claimed subscriber comes with its secret; got %q", subs[0].Secret)
	}
	return subs[0]
}

func due(t *testing.T, s plantstore.Store, subscriberID int64) []plantstore.Delivery {
	t.Helper()
	ds, err := s.DueDeliveries(context.Background(), subscriberID, 100)
	if err != nil {
		t.Fatalf("DueDeliveries(%d): %v", subscriberID, err)
	}
	return ds
}

func plantIDs(ds []plantstore.Delivery) []int64 {
	ids := make([]int64, len(ds))
	for i, d := range ds {
		ids[i] = d.Plant.ID
	}
	return ids
}

func testOutboxFollowsCreates(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	mustCreate(t, s, plantstore.Plant{ID: 1, Name: "before any subscriber"})
	a := mustAddSubscriber(t, s, "https://a.example/hook")
	b := mustAddSubscriber(t, s, "https://b.example/hook")

	mustCreate(t, s, plantstore.Plant{ID: 2, Name: "fern", Tag: ptr("green")})
	mustCreate(t, s, plantstore.Plant{ID: 3, Name: "moss"})
	// Neither a replay nor a conflict is a new plant.
	mustCreate(t, s, plantstore.Plant{ID: 2, Name: "fern", Tag: ptr("green")})
	if _, err := s.CreatePlant(ctx, plantstore.Plant{ID: 3, Name: "other"}); plantstore.ErrorCode(err) != plantstore.ECONFLICT {
		t.Fatalf("conflicting create: %v", err)
	}
	// Neither is an update or a delete.
	if err := s.UpdatePlant(ctx, plantstore.Plant{ID: 3, Name: "moss, renamed"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePlant(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}

	for _, sub := range []plantstore.Subscriber{a, b} {
		ds := due(t, s, sub.ID)
		if got := plantIDs(ds); fmt.Sprint(got) != "[2 3]" {
			t.Fatalf("subscriber %d: deliveries for plants %v, want [2 3]", sub.ID, got)
		}
		if d := ds[0]; d.Plant.Name != "fern" || d.Plant.Tag == nil || *d.Plant.Tag != "green" || d.Attempts != 0 || d.CreatedAt.IsZero() {
			t.Errorf("subscriber %d: first delivery %+v, want fern tagged green, no attempts", sub.ID, d)
		}
		if d := ds[1]; d.Plant.Name != "moss" || d.Plant.Tag != nil {
			t.Errorf("subscriber %d: second delivery %+v, want the plant as created: moss, no tag", sub.ID, d)
		}
		if got := subscriberByID(t, s, sub.ID); got.Pending != 2 || got.Delivered != 0 || got.Failed != 0 {
			t.Errorf("subscriber %d counts %d/%d/%d, want 2 pending", sub.ID, got.Pending, got.Delivered, got.Failed)
		}
	}
	// One event, one id, whichever subscriber it goes to; two events, two ids.
	da, db := due(t, s, a.ID), due(t, s, b.ID)
	if da[0].EventID != db[0].EventID || da[0].EventID == da[1].EventID || len(da[0].EventID) < 20 {
		t.Errorf("event ids: a %q %q, b %q", da[0].EventID, da[1].EventID, db[0].EventID)
	}
	c, err := s.CountDeliveries(ctx)
	if err != nil || c != (plantstore.DeliveryCounts{Pending: 4}) {
		t.Errorf("CountDeliveries = %+v, %v; want 4 pending", c, err)
	}
}

func testOutboxConcurrent(t *testing.T, s plantstore.Store) {
	sub := mustAddSubscriber(t, s, "https://a.example/hook")
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := s.CreatePlant(context.Background(), plantstore.Plant{ID: int64(1000 + i), Name: "p"}); err != nil {
				t.Error(err)
			}
			// Half of them replayed at once: still one event each.
			if i%2 == 0 {
				if _, err := s.CreatePlant(context.Background(), plantstore.Plant{ID: int64(1000 + i), Name: "p"}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	ds := due(t, s, sub.ID)
	seen := map[int64]bool{}
	for _, d := range ds {
		if seen[d.Plant.ID] {
			t.Errorf("plant %d announced twice", d.Plant.ID)
		}
		seen[d.Plant.ID] = true
	}
	if len(seen) != n {
		t.Errorf("%d plants announced, want %d", len(seen), n)
	}
}

func testLeaseIsExclusive(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	// No subscriber has anything due: nothing to claim.
	sub := mustAddSubscriber(t, s, "https://a.example/hook")
	claimOne(t, s, "A", time.Minute, 0)
	mustCreate(t, s, plantstore.Plant{ID: 1, Name: "fern"})

	claimOne(t, s, "A", time.Minute, sub.ID)
	claimOne(t, s, "B", time.Minute, 0) // A holds it
	claimOne(t, s, "A", time.Minute, 0) // even A does not claim twice

	// A lets go: B may take it.
	if held, err := s.RecordAttempts(ctx, "A", sub.ID, nil, time.Minute, true); err != nil || !held {
		t.Fatalf("release by A: held %v, %v", held, err)
	}
	claimOne(t, s, "B", 50*time.Millisecond, sub.ID)

	// B's short lease runs out (B crashed, say): A takes over, and B learns
	// it lost the lease when it next records.
	time.Sleep(100 * time.Millisecond)
	claimOne(t, s, "A", time.Minute, sub.ID)
	if held, err := s.RecordAttempts(ctx, "B", sub.ID, nil, time.Minute, false); err != nil || held {
		t.Fatalf("renewal by B after A took over: held %v, %v; want false", held, err)
	}
	if held, err := s.RecordAttempts(ctx, "A", sub.ID, nil, time.Minute, false); err != nil || !held {
		t.Fatalf("renewal by A: held %v, %v; want true", held, err)
	}

	// Many claimers at once: exactly one wins.
	if _, err := s.RecordAttempts(ctx, "A", sub.ID, nil, 0, true); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := 0
	for i := range 8 {
		wg.Go(func() {
			subs, err := s.ClaimSubscribers(ctx, fmt.Sprintf("racer-%d", i), time.Minute, 10)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			winners += len(subs)
			mu.Unlock()
		})
	}
	wg.Wait()
	if winners != 1 {
		t.Errorf("%d racing claims won the one subscriber, want 1", winners)
	}
}

func testDeliveryLifecycle(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	sub := mustAddSubscriber(t, s, "https://a.example/hook")
	for id := int64(1); id <= 4; id++ {
		mustCreate(t, s, plantstore.Plant{ID: id, Name: "p"})
	}
	claimOne(t, s, "A", time.Minute, sub.ID)
	ds := due(t, s, sub.ID)
	if got := plantIDs(ds); fmt.Sprint(got) != "[1 2 3 4]" {
		t.Fatalf("due %v, want creation order [1 2 3 4]", got)
	}
	// Plant 1 delivered, plant 2 failed with a retry far ahead.
	held, err := s.RecordAttempts(ctx, "A", sub.ID, []plantstore.AttemptResult{
		{DeliveryID: ds[0].ID, Delivered: true},
		{DeliveryID: ds[1].ID, Status: 503, Error: "503 Service Unavailable", NextAttempt: time.Now().Add(time.Hour)},
	}, time.Minute, true)
	if err != nil || !held {
		t.Fatalf("RecordAttempts: held %v, %v", held, err)
	}
	got := subscriberByID(t, s, sub.ID)
	if got.Pending != 3 || got.Delivered != 1 || got.Failed != 0 || got.LastError != "503 Service Unavailable" {
		t.Errorf("after one delivered, one to retry: %+v", got)
	}
	// The head (plant 2) waits an hour; the rest wait behind it, and the
	// subscriber is not claimed meanwhile.
	if ds := due(t, s, sub.ID); len(ds) != 0 {
		t.Errorf("due while the head waits for its retry: %v", plantIDs(ds))
	}
	claimOne(t, s, "A", time.Minute, 0)

	// Make the head due again, then give up on it: plant 3 becomes the head.
	if _, err := s.RecordAttempts(ctx, "A", sub.ID, []plantstore.AttemptResult{
		{DeliveryID: ds[1].ID, Error: "timeout", NextAttempt: time.Now().Add(-time.Second)},
	}, 0, true); err != nil {
		t.Fatal(err)
	}
	claimOne(t, s, "A", time.Minute, sub.ID)
	head := due(t, s, sub.ID)
	if len(head) != 3 || head[0].ID != ds[1].ID || head[0].Attempts != 2 {
		t.Fatalf("due after the retry came due: %+v", head)
	}
	if _, err := s.RecordAttempts(ctx, "A", sub.ID, []plantstore.AttemptResult{
		{DeliveryID: head[0].ID, Status: 500, Error: "500 Internal Server Error", GiveUp: true},
	}, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	if got := plantIDs(due(t, s, sub.ID)); fmt.Sprint(got) != "[3 4]" {
		t.Errorf("due after giving up on plant 2: %v, want [3 4]", got)
	}
	got = subscriberByID(t, s, sub.ID)
	if got.Pending != 2 || got.Delivered != 1 || got.Failed != 1 || got.LastError != "500 Internal Server Error" {
		t.Errorf("after giving up on one: %+v", got)
	}
	// A result for a delivery that is gone changes nothing.
	if _, err := s.RecordAttempts(ctx, "A", sub.ID, []plantstore.AttemptResult{{DeliveryID: ds[0].ID, Delivered: true}}, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	if got := subscriberByID(t, s, sub.ID); got.Delivered != 1 {
		t.Errorf("a delivery recorded twice counted twice: %+v", got)
	}
	c, err := s.CountDeliveries(ctx)
	if err != nil || c != (plantstore.DeliveryCounts{Pending: 2, Delivered: 1, Failed: 1}) {
		t.Errorf("CountDeliveries = %+v, %v", c, err)
	}
}

func testDisableAndRemove(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	gone := mustAddSubscriber(t, s, "https://gone.example/hook")
	kept := mustAddSubscriber(t, s, "https://kept.example/hook")
	mustCreate(t, s, plantstore.Plant{ID: 1, Name: "p"})
	mustCreate(t, s, plantstore.Plant{ID: 2, Name: "p"})

	if err := s.DisableSubscriber(ctx, gone.ID, "410 Gone"); err != nil {
		t.Fatal(err)
	}
	got := subscriberByID(t, s, gone.ID)
	if got.DisabledAt == nil || got.DisabledReason != "410 Gone" || got.Pending != 0 || got.Failed != 2 {
		t.Errorf("disabled subscriber: %+v", got)
	}
	mustCreate(t, s, plantstore.Plant{ID: 3, Name: "p"})
	if ds := due(t, s, gone.ID); len(ds) != 0 {
		t.Errorf("a disabled subscriber still gets events: %v", plantIDs(ds))
	}
	if got := plantIDs(due(t, s, kept.ID)); fmt.Sprint(got) != "[1 2 3]" {
		t.Errorf("the other subscriber's deliveries: %v", got)
	}
	claimOne(t, s, "A", time.Minute, kept.ID) // never the disabled one

	if err := s.RemoveSubscriber(ctx, kept.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveSubscriber(ctx, kept.ID); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("removing twice: %v, want ENOTFOUND", err)
	}
	if err := s.DisableSubscriber(ctx, kept.ID, "410 Gone"); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("disabling a removed subscriber: %v, want ENOTFOUND", err)
	}
	if ds := due(t, s, kept.ID); len(ds) != 0 {
		t.Errorf("a removed subscriber's deliveries remain: %v", plantIDs(ds))
	}
	subs, err := s.Subscribers(ctx)
	if err != nil || len(subs) != 1 || subs[0].ID != gone.ID {
		t.Errorf("Subscribers after removal: %+v, %v", subs, err)
	}
	c, err := s.CountDeliveries(ctx)
	if err != nil || c != (plantstore.DeliveryCounts{Failed: 2}) {
		t.Errorf("CountDeliveries = %+v, %v; want the 2 failed of the disabled subscriber", c, err)
	}
}

// testLastError follows a subscriber's last error and its time: set by a
// failed attempt, replaced by the next, cleared by a delivery, set by
// disabling; a result for a delivery that is gone changes neither.
func testLastError(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	sub := mustAddSubscriber(t, s, "https://a.example/hook")
	for id := int64(1); id <= 4; id++ {
		mustCreate(t, s, plantstore.Plant{ID: id, Name: "p"})
	}
	if got := subscriberByID(t, s, sub.ID); got.LastError != "" || got.LastErrorAt != nil || got.State() != plantstore.SubscriberActive {
		t.Fatalf("a new subscriber: %+v, state %s", got, got.State())
	}
	claimOne(t, s, "A", time.Minute, sub.ID)
	ds := due(t, s, sub.ID)
	record := func(results ...plantstore.AttemptResult) {
		t.Helper()
		if _, err := s.RecordAttempts(ctx, "A", sub.ID, results, time.Minute, false); err != nil {
			t.Fatalf("RecordAttempts(%+v): %v", results, err)
		}
	}
	// failing checks the last error and that its time is between from and
	// now (the stores keep milliseconds or microseconds).
	failing := func(from time.Time, want string) time.Time {
		t.Helper()
		got := subscriberByID(t, s, sub.ID)
		if got.LastError != want || got.State() != plantstore.SubscriberFailing {
			t.Fatalf("last error %q, state %s; want %q, failing", got.LastError, got.State(), want)
		}
		if at := got.LastErrorAt; at == nil || at.Before(from.Add(-time.Millisecond)) || at.After(time.Now()) || at.Location() != time.UTC {
			t.Fatalf("last error at %v, want a UTC time between %v and now", at, from)
		}
		return *got.LastErrorAt
	}
	active := func(what string) {
		t.Helper()
		if got := subscriberByID(t, s, sub.ID); got.LastError != "" || got.LastErrorAt != nil || got.State() != plantstore.SubscriberActive {
			t.Fatalf("%s: last error %q at %v, state %s; want none, active", what, got.LastError, got.LastErrorAt, got.State())
		}
	}
	retry := func(d plantstore.Delivery, reason string) plantstore.AttemptResult {
		return plantstore.AttemptResult{DeliveryID: d.ID, Status: 503, Error: reason, NextAttempt: time.Now().Add(-time.Second)}
	}

	start := time.Now()
	record(retry(ds[0], "503 Service Unavailable"))
	first := failing(start, "503 Service Unavailable")
	time.Sleep(5 * time.Millisecond)
	record(retry(ds[0], "connection refused"))
	if second := failing(start, "connection refused"); !second.After(first) {
		t.Errorf("the second error's time %v is not after the first's %v", second, first)
	}
	record(plantstore.AttemptResult{DeliveryID: ds[0].ID, Delivered: true})
	active("after a delivery")

	// A failure, then a result for a delivery that is gone (delivered by
	// another instance, say): the error stays.
	record(retry(ds[1], "timeout"))
	record(plantstore.AttemptResult{DeliveryID: ds[0].ID, Delivered: true})
	failing(start, "timeout")

	// In one call, the last result decides: a delivery after a failure
	// given up on clears it; a failure after a delivery sets it.
	record(plantstore.AttemptResult{DeliveryID: ds[1].ID, Error: "500 Internal Server Error", GiveUp: true},
		plantstore.AttemptResult{DeliveryID: ds[2].ID, Delivered: true})
	active("after a give-up then a delivery")
	now := time.Now()
	record(plantstore.AttemptResult{DeliveryID: ds[3].ID, Delivered: true}, retry(plantstore.Delivery{ID: -1}, "ignored"))
	active("after a delivery and a result for no delivery")

	mustCreate(t, s, plantstore.Plant{ID: 5, Name: "p"})
	next := due(t, s, sub.ID)
	record(retry(next[0], "502 Bad Gateway"))
	failing(now, "502 Bad Gateway")

	// Disabled: the reason is the last error, and a delivery recorded
	// after (a race with the 410) does not hide it.
	now = time.Now()
	if err := s.DisableSubscriber(ctx, sub.ID, "410 Gone on event msg_x"); err != nil {
		t.Fatal(err)
	}
	got := subscriberByID(t, s, sub.ID)
	if got.State() != plantstore.SubscriberDisabled || got.LastError != "410 Gone on event msg_x" || got.LastErrorAt == nil || got.LastErrorAt.Before(now.Add(-time.Millisecond)) {
		t.Errorf("disabled: %+v, state %s", got, got.State())
	}

	// Removing the subscriber removes its error with it: a new one starts clean.
	if err := s.RemoveSubscriber(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	again := mustAddSubscriber(t, s, "https://a.example/hook")
	if got := subscriberByID(t, s, again.ID); got.LastError != "" || got.LastErrorAt != nil {
		t.Errorf("a subscriber added again: %+v", got)
	}
}
