package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

func runWebhooks(t *testing.T, open func(t *testing.T) plantstore.Store) {
	t.Run("OutboxFollowsCreates", func(t *testing.T) { testOutboxFollowsCreates(t, open(t)) })
	t.Run("OutboxUnderConcurrentCreates", func(t *testing.T) { testOutboxConcurrent(t, open(t)) })
	t.Run("LeaseIsExclusive", func(t *testing.T) { testLeaseIsExclusive(t, open(t)) })
	t.Run("ClaimsTakeTurns", func(t *testing.T) { testClaimsTakeTurns(t, open(t)) })
	t.Run("DeliveryLifecycle", func(t *testing.T) { testDeliveryLifecycle(t, open(t)) })
	t.Run("DisableAndRemove", func(t *testing.T) { testDisableAndRemove(t, open(t)) })
	t.Run("LastError", func(t *testing.T) { testLastError(t, open(t)) })
	t.Run("DeliveriesOfEveryType", func(t *testing.T) { testDeliveriesOfEveryType(t, open(t)) })
	t.Run("PlantOrderAndParking", func(t *testing.T) { testPlantOrderAndParking(t, open(t)) })
	t.Run("RetryParked", func(t *testing.T) { testRetryParked(t, open(t)) })
	t.Run("PausedUntilTheProbe", func(t *testing.T) { testPausedUntilTheProbe(t, open(t)) })
	t.Run("RetryNow", func(t *testing.T) { testRetryNow(t, open(t)) })
}

// RetryNow makes the deliveries that wait for a retry due, the
// subscriber's only, and leaves the parked ones parked.
func testRetryNow(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	sub := mustAddSubscriber(t, s, "https://back.example/hook")
	other := mustAddSubscriber(t, s, "https://other.example/hook")
	for id := int64(1); id <= 3; id++ {
		mustCreate(t, s, plantstore.Plant{ID: id, Name: "p"})
	}
	later := time.Now().Add(time.Hour)
	fail := func(id int64) {
		t.Helper()
		ds := due(t, s, id)
		if _, err := s.RecordAttempts(ctx, "A", id, []plantstore.AttemptResult{
			{DeliveryID: ds[0].ID, Error: "connection refused", NextAttempt: later},
			{DeliveryID: ds[1].ID, Error: "connection refused", GiveUp: true},
		}, time.Minute, false); err != nil {
			t.Fatal(err)
		}
	}
	fail(sub.ID)
	fail(other.ID)
	if got := plantIDs(due(t, s, sub.ID)); fmt.Sprint(got) != "[3]" {
		t.Fatalf("due before RetryNow: %v, want [3]", got)
	}
	if err := s.RetryNow(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	if got := plantIDs(due(t, s, sub.ID)); fmt.Sprint(got) != "[1 3]" {
		t.Errorf("due after RetryNow: %v, want [1 3] (2 stays parked)", got)
	}
	if got := plantIDs(due(t, s, other.ID)); fmt.Sprint(got) != "[3]" {
		t.Errorf("the other subscriber's due after RetryNow: %v, want [3]", got)
	}
}

// A subscriber paused (its receiver is down) is claimed by no one until
// the pause ends, though its deliveries are due; a claim tells whether
// its last attempt failed; an operator's retry ends the pause.
func testPausedUntilTheProbe(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	sub := mustAddSubscriber(t, s, "https://down.example/hook")
	other := mustAddSubscriber(t, s, "https://up.example/hook")
	mustCreate(t, s, plantstore.Plant{ID: 1, Name: "fern"})
	mustCreate(t, s, plantstore.Plant{ID: 2, Name: "ivy"})
	claimed, err := s.ClaimSubscribers(ctx, "A", time.Minute, 10)
	if err != nil || len(claimed) != 2 || claimed[0].LastError != "" {
		t.Fatalf("claimed %+v, %v; want both, with no last error before any attempt", claimed, err)
	}
	if held, err := s.RecordAttempts(ctx, "A", other.ID, nil, time.Minute, true); err != nil || !held {
		t.Fatalf("release of the other: held %v, %v", held, err)
	}
	ds := due(t, s, sub.ID)
	if _, err := s.RecordAttempts(ctx, "A", sub.ID, []plantstore.AttemptResult{
		{DeliveryID: ds[0].ID, Error: "connection refused", NextAttempt: time.Now().Add(-time.Second)},
		{DeliveryID: ds[1].ID, Status: 500, Error: "500 Internal Server Error", GiveUp: true},
	}, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	if held, err := s.PauseSubscriber(ctx, "B", sub.ID, time.Now().Add(time.Hour)); err != nil || held {
		t.Fatalf("PauseSubscriber by B, who holds no lease: held %v, %v; want false", held, err)
	}
	until := time.Now().Add(1500 * time.Millisecond)
	if held, err := s.PauseSubscriber(ctx, "A", sub.ID, until); err != nil || !held {
		t.Fatalf("PauseSubscriber by A: held %v, %v", held, err)
	}
	// Listed down, with its next probe.
	if got := subscriberByID(t, s, sub.ID); got.State() != plantstore.SubscriberDown || got.NextProbe == nil ||
		got.NextProbe.Sub(until).Abs() > time.Millisecond || got.NextProbe.Location() != time.UTC {
		t.Errorf("listed while paused: %+v, state %s; want down, its next probe at %v", got, got.State(), until.UTC())
	}
	// Its first delivery is due again, and the other subscriber's: only
	// the other is claimed.
	claimOne(t, s, "B", time.Minute, other.ID)
	claimOne(t, s, "B", time.Minute, 0)
	time.Sleep(time.Until(until) + 100*time.Millisecond)
	if got := subscriberByID(t, s, sub.ID); got.State() != plantstore.SubscriberFailing || got.NextProbe != nil {
		t.Errorf("listed once the pause ended: %+v, state %s; want failing, no next probe", got, got.State())
	}
	if got := claimOne(t, s, "B", time.Minute, sub.ID); got.LastError != "500 Internal Server Error" {
		t.Errorf("claimed after the pause: %+v; want its last error", got)
	}
	// Paused again for an hour: the operator's retry of the parked one
	// ends the pause, and it is claimed at once.
	if held, err := s.PauseSubscriber(ctx, "B", sub.ID, time.Now().Add(time.Hour)); err != nil || !held {
		t.Fatalf("PauseSubscriber by B: held %v, %v", held, err)
	}
	claimOne(t, s, "A", time.Minute, 0)
	if n, err := s.RetryDeliveries(ctx, sub.ID, nil); err != nil || n != 1 {
		t.Fatalf("RetryDeliveries: %d, %v; want the parked one", n, err)
	}
	claimOne(t, s, "A", time.Minute, sub.ID)
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

// The subscriber that has waited longest is claimed first: one never
// leased, then the one whose lease was given back first; not the lowest
// id, which would let a few busy subscribers keep every worker.
func testClaimsTakeTurns(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	var subs []int64
	for i := range 3 {
		subs = append(subs, mustAddSubscriber(t, s, fmt.Sprintf("https://%d.example/hook", i)).ID)
	}
	mustCreate(t, s, plantstore.Plant{ID: 1, Name: "fern"}) // due for each
	claim := func(want int64) {
		t.Helper()
		got, err := s.ClaimSubscribers(ctx, "A", time.Minute, 1)
		if err != nil || len(got) != 1 || got[0].ID != want {
			t.Fatalf("claimed %+v, %v; want subscriber %d", got, err, want)
		}
	}
	release := func(id int64) {
		t.Helper()
		time.Sleep(5 * time.Millisecond) // the releases' times apart
		if held, err := s.RecordAttempts(ctx, "A", id, nil, time.Minute, true); err != nil || !held {
			t.Fatalf("release of %d: held %v, %v", id, held, err)
		}
	}
	claim(subs[0])
	claim(subs[1])
	release(subs[0])
	claim(subs[2]) // never leased: before the one given back
	release(subs[1])
	release(subs[2])
	claim(subs[0]) // given back first
	claim(subs[1])
	release(subs[0])
	claim(subs[2])
	claim(subs[0])
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
	// Plant 2's delivery waits an hour; the other plants' do not wait
	// behind it.
	if got := plantIDs(due(t, s, sub.ID)); fmt.Sprint(got) != "[3 4]" {
		t.Errorf("due while plant 2 waits for its retry: %v, want [3 4]", got)
	}
	claimOne(t, s, "A", time.Minute, sub.ID)
	if _, err := s.RecordAttempts(ctx, "A", sub.ID, nil, 0, true); err != nil {
		t.Fatal(err)
	}

	// Make it due again, then park it.
	if _, err := s.RecordAttempts(ctx, "A", sub.ID, []plantstore.AttemptResult{
		{DeliveryID: ds[1].ID, Error: "timeout", NextAttempt: time.Now().Add(-time.Second)},
	}, 0, true); err != nil {
		t.Fatal(err)
	}
	claimOne(t, s, "A", time.Minute, sub.ID)
	head := due(t, s, sub.ID)
	if len(head) != 3 || head[0].ID != ds[1].ID || head[0].Attempts != 2 || head[0].FirstFailedAt == nil {
		t.Fatalf("due after the retry came due: %+v", head)
	}
	if _, err := s.RecordAttempts(ctx, "A", sub.ID, []plantstore.AttemptResult{
		{DeliveryID: head[0].ID, Status: 500, Error: "500 Internal Server Error", GiveUp: true},
	}, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	if got := plantIDs(due(t, s, sub.ID)); fmt.Sprint(got) != "[3 4]" {
		t.Errorf("due after parking plant 2: %v, want [3 4]", got)
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

func mustAddSubscriberFor(t *testing.T, s plantstore.Store, url string, events ...string) plantstore.Subscriber {
	t.Helper()
	sub, err := s.AddSubscriberFor(context.Background(), url, testSecret, events)
	if err != nil {
		t.Fatalf("AddSubscriberFor(%s, %v): %v", url, events, err)
	}
	return sub
}

// deliveryKinds is each delivery as "type:plant:seq".
func deliveryKinds(ds []plantstore.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%s:%d:%d", d.EventType, d.Plant.ID, d.Seq)
	}
	return out
}

// testDeliveriesOfEveryType: each subscriber gets the types it asked for,
// plant.created only by default, each delivery with its event's feed id,
// in the write's transaction; a write that changes nothing enqueues
// nothing.
func testDeliveriesOfEveryType(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	for _, bad := range [][]string{nil, {"plant.moved"}, {plantstore.EventCreated, "x"}} {
		if _, err := s.AddSubscriberFor(ctx, "https://bad.example/hook", testSecret, bad); plantstore.ErrorCode(err) != plantstore.EINVALID {
			t.Errorf("AddSubscriberFor with events %q: %v, want EINVALID", bad, err)
		}
	}
	def := mustAddSubscriber(t, s, "https://default.example/hook")
	all := mustAddSubscriberFor(t, s, "https://all.example/hook", plantstore.EventDeleted, plantstore.EventCreated, plantstore.EventUpdated, plantstore.EventDeleted)
	changes := mustAddSubscriberFor(t, s, "https://changes.example/hook", plantstore.EventUpdated, plantstore.EventDeleted)
	if fmt.Sprint(all.Events) != "[plant.created plant.updated plant.deleted]" {
		t.Errorf("AddSubscriberFor returned events %v, want them in order, once each", all.Events)
	}
	for sub, want := range map[int64]string{def.ID: "[plant.created]", all.ID: "[plant.created plant.updated plant.deleted]", changes.ID: "[plant.updated plant.deleted]"} {
		if got := subscriberByID(t, s, sub); fmt.Sprint(got.Events) != want {
			t.Errorf("subscriber %d listed with events %v, want %s", sub, got.Events, want)
		}
	}

	mustCreate(t, s, plantstore.Plant{ID: 1, Name: "fern", Tag: ptr("green")})
	if err := s.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "fern", Tag: ptr("blue")}, nil); err != nil {
		t.Fatal(err)
	}
	// The same content again changes nothing: no event, no delivery.
	if err := s.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "fern", Tag: ptr("blue")}, nil); err != nil {
		t.Fatal(err)
	}
	// Conditional writes enqueue in their transaction too.
	always := func(plantstore.Plant) bool { return true }
	if err := s.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "fern, renamed"}, always); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, plantstore.Plant{ID: 2, Name: "moss"})
	if err := s.DeletePlant(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePlant(ctx, 2, always); err != nil {
		t.Fatal(err)
	}
	// Refused writes enqueue nothing.
	if err := s.DeletePlant(ctx, 1, nil); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Fatalf("deleting twice: %v", err)
	}
	if err := s.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "x"}, nil); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Fatalf("updating a deleted plant: %v", err)
	}

	events, err := s.Events(ctx, plantstore.EventQuery{Limit: 100})
	if err != nil || len(events) != 6 {
		t.Fatalf("Events: %+v, %v; want 6", events, err)
	}
	var wantAll, wantChanges, wantDefault []string
	for _, e := range events {
		k := fmt.Sprintf("%s:%d:%d", e.Type, e.Plant.ID, e.ID)
		wantAll = append(wantAll, k)
		if e.Type == plantstore.EventCreated {
			wantDefault = append(wantDefault, k)
		} else {
			wantChanges = append(wantChanges, k)
		}
	}
	// Due deliveries come in id order, so in the order of the events.
	for sub, want := range map[int64][]string{def.ID: wantDefault, all.ID: wantAll, changes.ID: wantChanges} {
		ds, err := s.DueDeliveries(ctx, sub, 100)
		if err != nil {
			t.Fatal(err)
		}
		if got := deliveryKinds(ds); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("subscriber %d: deliveries %v, want %v", sub, got, want)
		}
	}
	// Each delivery holds the plant as its change left it, and its event's
	// time.
	ds := due(t, s, all.ID)
	for i, d := range ds {
		e := events[i]
		if !d.Plant.SameContent(e.Plant) || d.Plant.ID != e.Plant.ID || !d.CreatedAt.Equal(e.At) {
			t.Errorf("delivery %d: %+v at %v, want the event's plant %+v at %v", i, d.Plant, d.CreatedAt, e.Plant, e.At)
		}
	}
	// The same event has the same webhook-id for every subscriber.
	if dc := due(t, s, changes.ID); dc[0].EventID != ds[1].EventID || dc[0].EventID == ds[2].EventID {
		t.Errorf("webhook ids: %q for one subscriber, %q and %q for another", dc[0].EventID, ds[1].EventID, ds[2].EventID)
	}
}

// testPlantOrderAndParking: a plant's later deliveries wait behind one that
// waits for its retry, the other plants' do not, and once it is parked
// they go.
func testPlantOrderAndParking(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	sub := mustAddSubscriberFor(t, s, "https://a.example/hook", plantstore.EventTypes...)
	mustCreate(t, s, plantstore.Plant{ID: 1, Name: "a"})
	mustCreate(t, s, plantstore.Plant{ID: 2, Name: "b"})
	if err := s.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "a2"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePlant(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	ds := due(t, s, sub.ID)
	if got := plantIDs(ds); fmt.Sprint(got) != "[1 2 1 1]" {
		t.Fatalf("due %v, want [1 2 1 1]", got)
	}
	claimOne(t, s, "A", time.Minute, sub.ID)
	record := func(rs ...plantstore.AttemptResult) {
		t.Helper()
		if _, err := s.RecordAttempts(ctx, "A", sub.ID, rs, time.Minute, false); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now()
	record(plantstore.AttemptResult{DeliveryID: ds[0].ID, Status: 500, Error: "500 Internal Server Error", NextAttempt: time.Now().Add(time.Hour)})
	if got := deliveryKinds(due(t, s, sub.ID)); len(got) != 1 || got[0] != deliveryKinds(ds[1:2])[0] {
		t.Fatalf("due while plant 1's create waits: %v, want plant 2's alone", got)
	}
	// Later failures keep the time of the first.
	record(plantstore.AttemptResult{DeliveryID: ds[0].ID, Status: 503, Error: "503", NextAttempt: time.Now().Add(-time.Second)})
	again := due(t, s, sub.ID)
	if len(again) != 4 || again[0].FirstFailedAt == nil || again[0].FirstFailedAt.Before(before.Add(-time.Millisecond)) || again[0].Attempts != 2 {
		t.Fatalf("due once the retry is due: %+v", again)
	}
	first := *again[0].FirstFailedAt
	time.Sleep(5 * time.Millisecond)
	record(plantstore.AttemptResult{DeliveryID: ds[0].ID, Status: 503, Error: "503 Service Unavailable", NextAttempt: time.Now().Add(-time.Second)})
	again = due(t, s, sub.ID)
	if !again[0].FirstFailedAt.Equal(first) || again[0].Attempts != 3 {
		t.Errorf("after a third failure: first failed at %v, %d attempts; want %v, 3", again[0].FirstFailedAt, again[0].Attempts, first)
	}
	// Parked: plant 1's update and delete go, in order.
	record(plantstore.AttemptResult{DeliveryID: ds[0].ID, Status: 500, Error: "500 Internal Server Error", GiveUp: true},
		plantstore.AttemptResult{DeliveryID: ds[1].ID, Delivered: true})
	if got := deliveryKinds(due(t, s, sub.ID)); fmt.Sprint(got) != fmt.Sprint(deliveryKinds(ds[2:])) {
		t.Errorf("due after parking plant 1's create: %v, want %v", got, deliveryKinds(ds[2:]))
	}
	parked, err := s.ParkedDeliveries(ctx, sub.ID, 10)
	if err != nil || len(parked) != 1 {
		t.Fatalf("ParkedDeliveries: %+v, %v", parked, err)
	}
	p := parked[0]
	if p.ID != ds[0].ID || p.EventType != plantstore.EventCreated || p.ParkedAt == nil || p.LastStatus != 500 || p.LastError != "500 Internal Server Error" || p.Attempts != 4 || p.Seq != ds[0].Seq {
		t.Errorf("parked delivery %+v", p)
	}
	got := subscriberByID(t, s, sub.ID)
	if got.Pending != 2 || got.Failed != 1 || got.Delivered != 1 {
		t.Errorf("counts after parking: %+v", got)
	}
}

// testRetryParked: retried deliveries are pending and due again, with no
// failed attempt; what is not parked, or belongs to a disabled subscriber,
// is ENOTFOUND and nothing changes.
func testRetryParked(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	a := mustAddSubscriber(t, s, "https://a.example/hook")
	b := mustAddSubscriber(t, s, "https://b.example/hook")
	for id := int64(1); id <= 3; id++ {
		mustCreate(t, s, plantstore.Plant{ID: id, Name: "p"})
	}
	park := func(sub int64) []plantstore.Delivery {
		ds := due(t, s, sub)
		var rs []plantstore.AttemptResult
		for _, d := range ds {
			rs = append(rs, plantstore.AttemptResult{DeliveryID: d.ID, Status: 500, Error: "500", GiveUp: true})
		}
		if _, err := s.RecordAttempts(ctx, "A", sub, rs, time.Minute, true); err != nil {
			t.Fatal(err)
		}
		return ds
	}
	da, db := park(a.ID), park(b.ID)
	if ds := due(t, s, a.ID); len(ds) != 0 {
		t.Fatalf("due after parking all: %v", plantIDs(ds))
	}
	if all, err := s.ParkedDeliveries(ctx, 0, 100); err != nil || len(all) != 6 {
		t.Fatalf("ParkedDeliveries of all: %d, %v", len(all), err)
	}
	// One by id.
	if n, err := s.RetryDeliveries(ctx, 0, []int64{da[1].ID}); err != nil || n != 1 {
		t.Fatalf("RetryDeliveries(%d): %d, %v", da[1].ID, n, err)
	}
	ds := due(t, s, a.ID)
	if len(ds) != 1 || ds[0].ID != da[1].ID || ds[0].Attempts != 0 || ds[0].FirstFailedAt != nil {
		t.Fatalf("due after retrying one: %+v", ds)
	}
	// Not parked (any more), or no such delivery: ENOTFOUND, and the other
	// ids given with it are not retried.
	for _, ids := range [][]int64{{da[1].ID}, {da[0].ID, 999999}, {da[0].ID, db[0].ID}} {
		sub := int64(0)
		if len(ids) == 2 && ids[1] == db[0].ID {
			sub = a.ID // b's delivery is not a's
		}
		_, err := s.RetryDeliveries(ctx, sub, ids)
		if plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
			t.Errorf("RetryDeliveries(%d, %v): %v, want ENOTFOUND", sub, ids, err)
		}
		// It names the one that cannot be retried, and not the other.
		bad, good := ids[len(ids)-1], ids[0]
		if msg := plantstore.ErrorMessage(err); len(ids) == 2 && (!strings.Contains(msg, fmt.Sprint(bad)) || strings.Contains(msg, fmt.Sprint(good))) {
			t.Errorf("RetryDeliveries(%d, %v) names the wrong ones: %q", sub, ids, msg)
		}
	}
	if got := subscriberByID(t, s, a.ID); got.Failed != 2 || got.Pending != 1 {
		t.Errorf("after refused retries: %+v", got)
	}
	// All of a subscriber's.
	if n, err := s.RetryDeliveries(ctx, b.ID, nil); err != nil || n != 3 {
		t.Fatalf("RetryDeliveries of subscriber %d: %d, %v", b.ID, n, err)
	}
	if got := plantIDs(due(t, s, b.ID)); fmt.Sprint(got) != "[1 2 3]" {
		t.Errorf("due after retrying all: %v", got)
	}
	// A disabled subscriber's deliveries stay parked.
	if err := s.DisableSubscriber(ctx, a.ID, "410 Gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RetryDeliveries(ctx, a.ID, nil); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("retrying a disabled subscriber's: %v, want ENOTFOUND", err)
	}
	if _, err := s.RetryDeliveries(ctx, 0, []int64{da[0].ID}); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("retrying a disabled subscriber's delivery: %v, want ENOTFOUND", err)
	}
	if _, err := s.RetryDeliveries(ctx, 0, nil); plantstore.ErrorCode(err) != plantstore.EINVALID {
		t.Errorf("retrying with neither ids nor a subscriber: %v, want EINVALID", err)
	}
}
