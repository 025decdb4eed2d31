package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/sqlite"
	"github.com/plantstore/plantstore/internal/webhook"
)

// These tests run the dispatcher against a real SQLite store and real
// receivers on loopback, with a fast retry schedule.

// receiver is a subscriber endpoint that verifies each request as a real
// one would and records it.
type receiver struct {
	t      *testing.T
	key    []byte
	srv    *httptest.Server
	mu     sync.Mutex
	got    []delivery
	answer func(n int, d delivery) (status int, header http.Header) // n counts requests from 1
}

type delivery struct {
	id, timestamp string
	typ, seq      string         // plantstore-event-type and -id
	plant         map[string]any // the body; for updates and deletes, its "plant"
	event         map[string]any // the body of an update or a delete
	at            time.Time
}

func newReceiver(t *testing.T, secret string, answer func(n int, d delivery) (int, http.Header)) *receiver {
	t.Helper()
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, key: key, answer: answer}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		r.t.Errorf("reading a delivery: %v", err)
		return
	}
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
		r.t.Errorf("delivery %s with Content-Type %q, want POST application/json", req.Method, req.Header.Get("Content-Type"))
	}
	if err := webhook.Verify(r.key, req.Header, body, time.Now(), time.Minute); err != nil {
		r.t.Errorf("delivery's signature does not verify: %v", err)
	}
	d := delivery{id: req.Header.Get("webhook-id"), timestamp: req.Header.Get("webhook-timestamp"), at: time.Now(),
		typ: req.Header.Get(webhook.HeaderEventType), seq: req.Header.Get(webhook.HeaderEventID)}
	if err := json.Unmarshal(body, &d.plant); err != nil {
		r.t.Errorf("delivery body %q: %v", body, err)
	}
	if inner, ok := d.plant["plant"].(map[string]any); ok {
		d.event, d.plant = d.plant, inner
	}
	r.mu.Lock()
	r.got = append(r.got, d)
	n := len(r.got)
	r.mu.Unlock()
	status, header := http.StatusNoContent, http.Header(nil)
	if r.answer != nil {
		status, header = r.answer(n, d)
	}
	for k, v := range header {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// plantIDs lists the plant ids received, in arrival order.
func (r *receiver) plantIDs() []int64 {
	var ids []int64
	for _, d := range r.deliveries() {
		ids = append(ids, int64(d.plant["id"].(float64)))
	}
	return ids
}

type fixture struct {
	t     *testing.T
	store *sqlite.DB
	wake  chan struct{}
	disp  *webhook.Dispatcher
}

// start opens a store and runs a dispatcher on it until the test ends.
func start(t *testing.T, schedule webhook.Schedule) *fixture {
	t.Helper()
	return startWith(t, webhook.DispatcherConfig{Schedule: schedule})
}

// startWith is start with more of the dispatcher's configuration.
func startWith(t *testing.T, cfg webhook.DispatcherConfig) *fixture {
	t.Helper()
	return startWrapped(t, cfg, nil)
}

// startWrapped is startWith with the dispatcher's store seen through wrap.
func startWrapped(t *testing.T, cfg webhook.DispatcherConfig, wrap func(plantstore.WebhookStore) plantstore.WebhookStore) *fixture {
	t.Helper()
	f := &fixture{t: t, wake: make(chan struct{}, 1)}
	var err error
	f.store, err = sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "plants.db"), sqlite.Options{
		SoleServer: true,
		Enqueued: func() {
			select {
			case f.wake <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Client == nil {
		cfg.Client = webhook.NewClient(webhook.ClientOptions{AllowPrivate: true, Timeout: 2 * time.Second})
	}
	cfg.Store, cfg.Wake = f.store, f.wake
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if wrap != nil {
		cfg.Store = wrap(f.store)
	}
	if cfg.Poll == 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	f.disp, err = webhook.NewDispatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.disp.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		f.store.Close()
	})
	return f
}

var fast = webhook.Schedule{Intervals: []time.Duration{50 * time.Millisecond}, ParkAfter: time.Minute}

func (f *fixture) subscribe(answer func(n int, d delivery) (int, http.Header)) (*receiver, plantstore.Subscriber) {
	f.t.Helper()
	return f.subscribeTo([]string{plantstore.EventCreated}, answer)
}

func (f *fixture) subscribeTo(events []string, answer func(n int, d delivery) (int, http.Header)) (*receiver, plantstore.Subscriber) {
	f.t.Helper()
	secret, err := webhook.NewSecret()
	if err != nil {
		f.t.Fatal(err)
	}
	r := newReceiver(f.t, secret, answer)
	sub, err := f.store.AddSubscriberFor(context.Background(), r.srv.URL+"/hooks/plants?source=test", secret, events)
	if err != nil {
		f.t.Fatal(err)
	}
	return r, sub
}

func (f *fixture) create(ids ...int64) {
	f.t.Helper()
	for _, id := range ids {
		if _, err := f.store.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: fmt.Sprintf("plant %d", id)}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// eventually polls cond until it holds or 5 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) subscriber(id int64) plantstore.Subscriber {
	f.t.Helper()
	subs, err := f.store.Subscribers(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	for _, s := range subs {
		if s.ID == id {
			return s
		}
	}
	f.t.Fatalf("subscriber %d not found", id)
	return plantstore.Subscriber{}
}

func TestDeliversEachNewPlantSigned(t *testing.T) {
	f := start(t, fast)
	r, sub := f.subscribe(nil)
	tag := "green"
	if _, err := f.store.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "fern", Tag: &tag}); err != nil {
		t.Fatal(err)
	}
	f.create(2, 3, 4, 5)
	eventually(t, "five deliveries", func() bool { return len(r.deliveries()) == 5 })
	// Different plants go side by side: any order, each once.
	if got := slices.Sorted(slices.Values(r.plantIDs())); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Errorf("received plants %v, want 1..5 once each", got)
	}
	for _, d := range r.deliveries() {
		switch d.plant["id"] {
		case float64(1):
			want := map[string]any{"id": float64(1), "name": "fern", "tag": "green"}
			if fmt.Sprint(d.plant) != fmt.Sprint(want) {
				t.Errorf("body %v, want the NewPlant %v", d.plant, want)
			}
		default:
			if _, ok := d.plant["tag"]; ok {
				t.Errorf("a plant without a tag was sent with one: %v", d.plant)
			}
		}
		if d.typ != plantstore.EventCreated || d.seq != fmt.Sprint(d.plant["id"]) {
			t.Errorf("plant %v: event type %q, id %q; want plant.created and the feed's id, here the plant's", d.plant["id"], d.typ, d.seq)
		}
	}
	eventually(t, "the deliveries counted", func() bool { s := f.subscriber(sub.ID); return s.Delivered == 5 && s.Pending == 0 })
	if st := f.disp.Stats(); st.Attempts != 5 || st.Delivered != 5 {
		t.Errorf("stats %+v, want 5 attempts, 5 delivered", st)
	}
}

// Under concurrency, one plant's events arrive in the feed's order, while
// several plants' are in flight at once, never more than Concurrency.
func TestOnePlantInOrderManyPlantsAtOnce(t *testing.T) {
	const concurrency = 8
	f := startWith(t, webhook.DispatcherConfig{Schedule: fast, Concurrency: concurrency})
	var inFlight, most atomic.Int64
	r, sub := f.subscribeTo(plantstore.EventTypes, func(int, delivery) (int, http.Header) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		return http.StatusOK, nil
	})
	ctx := context.Background()
	const plants = 40
	var wg sync.WaitGroup
	for id := int64(1); id <= plants; id++ {
		wg.Go(func() {
			for _, step := range []func() error{
				func() error { _, err := f.store.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "a"}); return err },
				func() error { return f.store.UpdatePlant(ctx, plantstore.Plant{ID: id, Name: "b"}, nil) },
				func() error { return f.store.DeletePlant(ctx, id, nil) },
			} {
				if err := step(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	eventually(t, "every event delivered", func() bool { return f.subscriber(sub.ID).Delivered == 3*plants })
	seen := map[int64][]string{}
	last := map[int64]int64{}
	for _, d := range r.deliveries() {
		id := int64(d.plant["id"].(float64))
		seq, err := strconv.ParseInt(d.seq, 10, 64)
		if err != nil {
			t.Fatalf("%s %q: %v", webhook.HeaderEventID, d.seq, err)
		}
		if seq <= last[id] {
			t.Errorf("plant %d: event %d arrived after event %d", id, seq, last[id])
		}
		last[id] = seq
		seen[id] = append(seen[id], d.typ)
	}
	for id := int64(1); id <= plants; id++ {
		if got := fmt.Sprint(seen[id]); got != "[plant.created plant.updated plant.deleted]" {
			t.Errorf("plant %d: %s", id, got)
		}
	}
	if m := most.Load(); m < 2 || m > concurrency {
		t.Errorf("at most %d requests in flight at once; want several, and no more than %d", m, concurrency)
	}
}

// failTwice has a subscriber refuse plant 1's delivery twice, then take
// it, and returns the three attempts it received.
func (f *fixture) failTwice() []delivery {
	f.t.Helper()
	r, sub := f.subscribe(func(n int, _ delivery) (int, http.Header) {
		if n <= 2 {
			return http.StatusInternalServerError, nil
		}
		return http.StatusOK, nil
	})
	f.create(1)
	eventually(f.t, "the third attempt", func() bool { return f.subscriber(sub.ID).Delivered == 1 })
	return r.deliveries()
}

func TestRetriesUntilSuccessWithTheSameID(t *testing.T) {
	f := start(t, fast)
	ds := f.failTwice()
	if len(ds) != 3 {
		t.Fatalf("%d attempts, want 3 (two failures, then success)", len(ds))
	}
	if ds[0].id != ds[1].id || ds[1].id != ds[2].id || ds[0].id == "" {
		t.Errorf("webhook-id changed across retries: %q %q %q", ds[0].id, ds[1].id, ds[2].id)
	}
	if gap := ds[1].at.Sub(ds[0].at); gap < 35*time.Millisecond {
		t.Errorf("retried after %v, before the schedule's 50 ms (less 20%% jitter)", gap)
	}
	if st := f.disp.Stats(); st.Attempts != 3 || st.Retried != 2 || st.Delivered != 1 {
		t.Errorf("stats %+v", st)
	}
}

// A retry goes when its wait ends, not at the next poll after: with a
// poll of an hour, a failed attempt is retried within its 300 ms ±20%.
func TestRetryKeepsItsTimeBetweenPolls(t *testing.T) {
	f := startWith(t, webhook.DispatcherConfig{Poll: time.Hour,
		Schedule: webhook.Schedule{Intervals: []time.Duration{300 * time.Millisecond}, ParkAfter: time.Minute}})
	ds := f.failTwice()
	for i := 1; i < len(ds); i++ {
		// 240-360 ms, plus the claim's spacing and the attempt's own time.
		if gap := ds[i].at.Sub(ds[i-1].at); gap < 240*time.Millisecond || gap > 600*time.Millisecond {
			t.Errorf("attempt %d came %v after the one before, want 300 ms ±20%%", i+1, gap)
		}
	}
}

// A claim that fails when a retry falls due does not lose it: the claims
// after it find it, not the next poll, an hour on.
func TestRetryOutlivesAFailedClaim(t *testing.T) {
	claims := &failingClaims{}
	f := startWrapped(t, webhook.DispatcherConfig{Poll: time.Hour,
		Schedule: webhook.Schedule{Intervals: []time.Duration{300 * time.Millisecond}, ParkAfter: time.Minute}},
		func(s plantstore.WebhookStore) plantstore.WebhookStore { claims.WebhookStore = s; return claims })
	r, sub := f.subscribe(func(n int, _ delivery) (int, http.Header) {
		if n == 1 {
			// Every claim fails until the retry has come due.
			claims.until.Store(time.Now().Add(500 * time.Millisecond).UnixNano())
			return http.StatusInternalServerError, nil
		}
		return http.StatusOK, nil
	})
	f.create(1)
	eventually(t, "the retry after the failed claims", func() bool { return f.subscriber(sub.ID).Delivered == 1 })
	if ds := r.deliveries(); len(ds) != 2 || ds[1].at.Sub(ds[0].at) > 900*time.Millisecond {
		t.Errorf("%d attempts; want the retry soon after the claims work again", len(ds))
	}
	if claims.failed.Load() == 0 {
		t.Error("no claim failed: the test tested nothing")
	}
}

// failingClaims fails every claim until the time in until.
type failingClaims struct {
	plantstore.WebhookStore
	until  atomic.Int64 // Unix nanoseconds
	failed atomic.Int64
}

func (c *failingClaims) ClaimSubscribers(ctx context.Context, owner string, lease time.Duration, n int) ([]plantstore.Subscriber, error) {
	if time.Now().UnixNano() < c.until.Load() {
		c.failed.Add(1)
		return nil, errors.New("the claim failed (a test's)")
	}
	return c.WebhookStore.ClaimSubscribers(ctx, owner, lease, n)
}

func TestHonoursRetryAfter(t *testing.T) {
	f := start(t, fast)
	r, sub := f.subscribe(func(n int, _ delivery) (int, http.Header) {
		if n == 1 {
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"1"}}
		}
		return http.StatusOK, nil
	})
	f.create(1)
	eventually(t, "the retry", func() bool { return f.subscriber(sub.ID).Delivered == 1 })
	ds := r.deliveries()
	if gap := ds[1].at.Sub(ds[0].at); gap < 900*time.Millisecond {
		t.Errorf("retried %v after a Retry-After of 1 s", gap)
	}
}

// A Retry-After longer than the park-after bound is honoured, once: the
// delivery is tried again when the receiver asked, not parked at its
// first answer.
func TestRetryAfterPastTheParkingBound(t *testing.T) {
	f := start(t, webhook.Schedule{Intervals: []time.Duration{50 * time.Millisecond}, ParkAfter: 500 * time.Millisecond})
	r, sub := f.subscribe(func(n int, _ delivery) (int, http.Header) {
		if n == 1 {
			return http.StatusServiceUnavailable, http.Header{"Retry-After": {"2"}}
		}
		return http.StatusOK, nil
	})
	f.create(1)
	eventually(t, "the retry", func() bool { return f.subscriber(sub.ID).Delivered == 1 })
	ds := r.deliveries()
	if gap := ds[1].at.Sub(ds[0].at); gap < 1900*time.Millisecond {
		t.Errorf("retried %v after a Retry-After of 2 s", gap)
	}
	if got := f.subscriber(sub.ID); got.Failed != 0 {
		t.Errorf("%d parked; the Retry-After was past the bound, and honoured", got.Failed)
	}
}

// A failing delivery holds back its plant's later events, so their order
// survives an outage of the receiver, and not the other plants' events.
func TestOrderSurvivesFailures(t *testing.T) {
	f := start(t, fast)
	r, sub := f.subscribeTo(plantstore.EventTypes, func(n int, d delivery) (int, http.Header) {
		if d.plant["id"] == float64(1) && d.typ == plantstore.EventCreated && n <= 4 {
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusOK, nil
	})
	ctx := context.Background()
	f.create(1)
	eventually(t, "plant 1's first attempt", func() bool { return len(r.deliveries()) >= 1 })
	if err := f.store.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "renamed"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.store.DeletePlant(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	f.create(2, 3)
	eventually(t, "all five delivered", func() bool { return f.subscriber(sub.ID).Delivered == 5 })
	var one []string
	arrived := map[int64]int{} // plant: position of its first arrival
	for i, d := range r.deliveries() {
		id := int64(d.plant["id"].(float64))
		if _, ok := arrived[id]; !ok {
			arrived[id] = i
		}
		if id == 1 {
			one = append(one, d.typ)
		}
	}
	want := "[plant.created plant.created plant.created plant.created plant.updated plant.deleted]"
	if got := fmt.Sprint(one); got != want && got != strings.Replace(want, "plant.created ", "", 1) {
		t.Errorf("plant 1's arrivals %s, want its create failed, then delivered, then its update and delete", got)
	}
	// Plants 2 and 3 did not wait for plant 1's retries.
	if f.subscriber(sub.ID).Delivered == 5 && len(r.deliveries()) > 0 {
		lastOfOne := 0
		for i, d := range r.deliveries() {
			if d.plant["id"] == float64(1) {
				lastOfOne = i
			}
		}
		if arrived[2] > lastOfOne && arrived[3] > lastOfOne {
			t.Errorf("plants 2 and 3 arrived only after every attempt at plant 1: %v", r.plantIDs())
		}
	}
}

func TestGoneDisablesTheSubscriber(t *testing.T) {
	logs := &syncBuffer{}
	f := startWith(t, webhook.DispatcherConfig{Log: slog.New(slog.NewJSONHandler(logs, nil)), Schedule: fast})
	r, sub := f.subscribe(func(int, delivery) (int, http.Header) { return http.StatusGone, nil })
	f.create(1, 2)
	eventually(t, "the subscriber disabled", func() bool { return f.subscriber(sub.ID).DisabledAt != nil })
	s := f.subscriber(sub.ID)
	if s.Pending != 0 || s.Failed != 2 || s.Delivered != 0 {
		t.Errorf("after 410: %+v, want its 2 deliveries failed", s)
	}
	// Plants 1 and 2 may have been in flight together; nothing goes after.
	before := len(r.deliveries())
	if before < 1 || before > 2 {
		t.Errorf("%d requests reached a subscriber that answered 410, want 1 or 2 (the plants in flight)", before)
	}
	// A create after it enqueues nothing for it, so nothing can be sent:
	// the store says so at once, without waiting for what does not come.
	f.create(3)
	if s := f.subscriber(sub.ID); s.Pending != 0 || s.Failed != 2 || s.Delivered != 0 {
		t.Errorf("a create after the 410: %+v, want nothing more enqueued", s)
	}
	if n := len(r.deliveries()); n != before {
		t.Errorf("%d requests reached a subscriber after it was disabled", n-before)
	}
	// An operator alerting on errors learns of it: its parked deliveries
	// have no line of their own.
	if !strings.Contains(logs.String(), `"level":"ERROR","msg":"webhook subscriber disabled; its pending deliveries are parked`) {
		t.Errorf("no ERROR line says the subscriber was disabled and its deliveries parked:\n%s", logs)
	}
	if st := f.disp.Stats(); st.Disabled != 1 {
		t.Errorf("stats %+v, want one disabled", st)
	}
}

// A delivery that keeps failing is parked after ParkAfter; its plant's
// later events go on, the parked one is listed and, retried, goes again
// with the same webhook-id.
func TestParksThenGoesOnWithThePlant(t *testing.T) {
	logs := &syncBuffer{}
	f := startWith(t, webhook.DispatcherConfig{Log: slog.New(slog.NewJSONHandler(logs, nil)),
		Schedule: webhook.Schedule{Intervals: []time.Duration{50 * time.Millisecond}, ParkAfter: 300 * time.Millisecond}})
	var refuse atomic.Bool
	refuse.Store(true)
	r, sub := f.subscribeTo(plantstore.EventTypes, func(_ int, d delivery) (int, http.Header) {
		if d.typ == plantstore.EventCreated && d.plant["id"] == float64(1) && refuse.Load() {
			return http.StatusBadGateway, nil
		}
		return http.StatusOK, nil
	})
	f.create(1)
	if err := f.store.UpdatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "renamed"}, nil); err != nil {
		t.Fatal(err)
	}
	f.create(2)
	eventually(t, "plant 1's create parked, its update and plant 2 delivered", func() bool {
		s := f.subscriber(sub.ID)
		return s.Failed == 1 && s.Delivered == 2
	})
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "delivery parked") != strings.Contains(line, `"outcome":"parked"`) {
			t.Errorf("a log line's outcome does not say whether it parked: %s", line)
		}
	}
	if !strings.Contains(logs.String(), `"outcome":"parked"`) {
		t.Errorf("no log line says the delivery was parked:\n%s", logs)
	}
	// The update's delivery cleared the error of the create's; Failed
	// keeps the count of the parked.
	if s := f.subscriber(sub.ID); s.LastError != "" || s.State() != plantstore.SubscriberActive || s.Pending != 0 {
		t.Errorf("after parking, then delivering: %+v", s)
	}
	c, err := f.store.CountDeliveries(context.Background())
	if err != nil || c != (plantstore.DeliveryCounts{Delivered: 2, Failed: 1}) {
		t.Errorf("CountDeliveries = %+v, %v", c, err)
	}
	parked, err := f.store.ParkedDeliveries(context.Background(), sub.ID, 10)
	if err != nil || len(parked) != 1 || parked[0].Plant.ID != 1 || parked[0].LastStatus != http.StatusBadGateway {
		t.Fatalf("parked: %+v, %v", parked, err)
	}
	var refusedID string
	for _, d := range r.deliveries() {
		if d.typ == plantstore.EventCreated && d.plant["id"] == float64(1) {
			refusedID = d.id
		}
	}
	refuse.Store(false)
	if n, err := f.store.RetryDeliveries(context.Background(), sub.ID, nil); err != nil || n != 1 {
		t.Fatalf("RetryDeliveries: %d, %v", n, err)
	}
	eventually(t, "the retried delivery", func() bool { return f.subscriber(sub.ID).Delivered == 3 })
	ds := r.deliveries()
	if last := ds[len(ds)-1]; last.id != refusedID || last.typ != plantstore.EventCreated {
		t.Errorf("the retry went as %s %s, want %s, the parked event's webhook-id", last.typ, last.id, refusedID)
	}
}

// A receiver that is down gets probes, not its backlog: some attempts
// find it down, then a probe (three attempts at most) goes when the
// earliest retry falls due, and none of the backlog is parked meanwhile.
// Once it answers, the whole backlog goes.
func TestDownReceiverIsProbedNotFlooded(t *testing.T) {
	logs := &syncBuffer{}
	f := startWith(t, webhook.DispatcherConfig{Concurrency: 4, Log: slog.New(slog.NewJSONHandler(logs, nil)),
		Schedule: webhook.Schedule{Intervals: []time.Duration{500 * time.Millisecond}, ParkAfter: time.Minute}})
	var down atomic.Bool
	down.Store(true)
	r, sub := f.subscribe(func(int, delivery) (int, http.Header) {
		if down.Load() {
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusNoContent, nil
	})
	const plants = 200
	for id := range int64(plants) {
		f.create(id + 1)
	}
	time.Sleep(2 * time.Second)
	// Ten in a row, some more in flight, then a probe every 500 ms ±20%:
	// some 30. Every plant tried every 500 ms would be some 800.
	if n := len(r.deliveries()); n < 10 || n > 60 {
		t.Errorf("%d attempts in 2 s at a receiver that is down, with %d plants waiting; want a probe now and then", n, plants)
	}
	// Down while paused; failing while a probe goes.
	if s := f.subscriber(sub.ID); s.Failed != 0 || s.Pending != plants || (s.State() != plantstore.SubscriberDown && s.State() != plantstore.SubscriberFailing) {
		t.Errorf("while the receiver is down: %+v; want every delivery pending, none parked", s)
	}
	if st := f.disp.Stats(); st.Paused < 2 {
		t.Errorf("stats %+v; want the subscriber paused when found down, and again at each probe", st)
	}
	if n := strings.Count(logs.String(), "webhook receiver down;"); n != 1 {
		t.Errorf("%d warnings that the receiver is down, want one:\n%s", n, logs)
	}
	down.Store(false)
	eventually(t, "the backlog delivered", func() bool { return f.subscriber(sub.ID).Delivered == plants })
	if s := f.subscriber(sub.ID); s.Pending != 0 || s.Failed != 0 || s.State() != plantstore.SubscriberActive {
		t.Errorf("after the receiver came back: %+v", s)
	}
}

// Events that come one at a time, each its own turn, find a receiver
// that is down too: the failures in a row are counted across turns, so
// it is paused after three, not tried at every event and every retry.
func TestDownReceiverFoundAtLowRates(t *testing.T) {
	f := start(t, webhook.Schedule{Intervals: []time.Duration{time.Second}, ParkAfter: time.Minute})
	r, _ := f.subscribe(func(int, delivery) (int, http.Header) { return http.StatusServiceUnavailable, nil })
	for id := int64(1); id <= 20; id++ {
		f.create(id)
		time.Sleep(100 * time.Millisecond)
	}
	// Three (the first at full speed, then probes), paused until the
	// first retry, about 1 s; a probe of three then, and again.
	if st := f.disp.Stats(); st.Paused == 0 || len(r.deliveries()) > 12 {
		t.Errorf("stats %+v, %d attempts at 20 events in 2 s; want the receiver paused after three", st, len(r.deliveries()))
	}
}

// A receiver that times out is paused again after its probe, though each
// attempt outlasts a turn and every worker is taken: a probe is not cut
// short for others' turn, which would give it back unpaused, to be
// claimed and probed again at once, an attempt at a time, for ever.
func TestTimingOutReceiverPausedUnderContention(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	f := startWith(t, webhook.DispatcherConfig{Workers: 1, Concurrency: 16,
		Client:   webhook.NewClient(webhook.ClientOptions{AllowPrivate: true, Timeout: 1200 * time.Millisecond}),
		Schedule: webhook.Schedule{Intervals: []time.Duration{time.Second}, ParkAfter: time.Minute}})
	r, _ := f.subscribe(func(int, delivery) (int, http.Header) {
		<-hang
		return http.StatusOK, nil
	})
	for id := int64(1); id <= 40; id++ {
		f.create(id)
	}
	// 16 attempts time out (1.2 s): paused until about 2.2 s; then a
	// probe, three attempts one after another (to about 5.8 s): paused
	// again.
	deadline := time.Now().Add(9 * time.Second)
	for f.disp.Stats().Paused < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("paused %d times in 9 s, %d attempts: the probe of a receiver that times out was not paused", f.disp.Stats().Paused, len(r.deliveries()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(r.deliveries()); n > 16+3+1 {
		t.Errorf("%d attempts; want the 16 in flight when it was found down, then a probe of 3", n)
	}
}

// A receiver that refuses one plant's event with a 503 is up for the
// others: a probe that tries that event tries others too, and they go at
// once, not after that event's retries.
func TestProbePastOneRefusedEvent(t *testing.T) {
	claims := &gatedClaims{}
	f := startWrapped(t, webhook.DispatcherConfig{
		Schedule: webhook.Schedule{Intervals: []time.Duration{5 * time.Second}, ParkAfter: time.Minute}},
		func(s plantstore.WebhookStore) plantstore.WebhookStore { claims.WebhookStore = s; return claims })
	r, sub := f.subscribe(func(_ int, d delivery) (int, http.Header) {
		if d.plant["id"] == float64(1) {
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusNoContent, nil
	})
	for id := int64(1); id <= 20; id++ {
		f.create(id)
	}
	// Plant 1's event failed once, its retry due now: the subscriber is
	// failing, and the dispatcher's first claim probes it, plant 1 first.
	ctx := context.Background()
	if subs, err := f.store.ClaimSubscribers(ctx, "test", time.Minute, 1); err != nil || len(subs) != 1 {
		t.Fatalf("claim: %+v, %v", subs, err)
	}
	ds, err := f.store.DueDeliveries(ctx, sub.ID, 1)
	if err != nil || len(ds) != 1 || ds[0].Plant.ID != 1 {
		t.Fatalf("due: %+v, %v", ds, err)
	}
	if _, err := f.store.RecordAttempts(ctx, "test", sub.ID, []plantstore.AttemptResult{{DeliveryID: ds[0].ID, Status: 503,
		Error: "503 Service Unavailable", NextAttempt: time.Now().Add(-time.Millisecond)}}, time.Minute, true); err != nil {
		t.Fatal(err)
	}
	claims.open.Store(true)
	begin := time.Now()
	eventually(t, "plants 2 to 20 delivered", func() bool { return f.subscriber(sub.ID).Delivered == 19 })
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("plants 2 to 20 delivered %v after the first claim, behind plant 1's retry (4 s at the soonest)", took.Round(time.Millisecond))
	}
	if got := r.plantIDs(); got[0] != 1 {
		t.Errorf("the probe went to plants %v; want plant 1 first, the oldest due", got)
	}
}

// Once a probe finds a receiver that was down up, what failed while it
// was down goes at once, not at its retry: here plant 1's, which the
// receiver, failing, asked to be retried in a minute.
func TestBackUpRetriesWhatFailedMeanwhile(t *testing.T) {
	f := startWith(t, webhook.DispatcherConfig{Concurrency: 4,
		Schedule: webhook.Schedule{Intervals: []time.Duration{100 * time.Millisecond}, ParkAfter: 5 * time.Minute}})
	var down atomic.Bool
	down.Store(true)
	_, sub := f.subscribe(func(_ int, d delivery) (int, http.Header) {
		switch {
		case !down.Load():
			return http.StatusNoContent, nil
		case d.plant["id"] == float64(1):
			return http.StatusServiceUnavailable, http.Header{"Retry-After": {"60"}}
		}
		return http.StatusServiceUnavailable, nil
	})
	for id := int64(1); id <= 20; id++ {
		f.create(id)
	}
	eventually(t, "the subscriber paused", func() bool { return f.disp.Stats().Paused > 0 })
	down.Store(false)
	eventually(t, "all 20 delivered, plant 1's too", func() bool { return f.subscriber(sub.ID).Delivered == 20 })
}

// A plant's event that waits for its retry holds up no event made after
// it: the probe that follows the failure (the subscriber's last attempt
// failed) finds them, though they were not yet written as deliveries
// (SQLite copies them from the change feed as they are needed).
func TestLaterPlantsPassAWaitingRetry(t *testing.T) {
	f := start(t, webhook.Schedule{Intervals: []time.Duration{10 * time.Second}, ParkAfter: time.Minute})
	r, sub := f.subscribe(func(_ int, d delivery) (int, http.Header) {
		if d.plant["id"] == float64(1) {
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusNoContent, nil
	})
	f.create(1)
	eventually(t, "plant 1's first attempt", func() bool { return len(r.deliveries()) == 1 })
	eventually(t, "plant 1's failure recorded", func() bool { return f.subscriber(sub.ID).LastError != "" })
	begin := time.Now()
	f.create(2, 3)
	eventually(t, "plants 2 and 3", func() bool { return f.subscriber(sub.ID).Delivered == 2 })
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("plants 2 and 3 delivered %v after their creates, behind plant 1's retry", took.Round(time.Millisecond))
	}
}

// gatedClaims claims nothing until open.
type gatedClaims struct {
	plantstore.WebhookStore
	open atomic.Bool
}

func (c *gatedClaims) ClaimSubscribers(ctx context.Context, owner string, lease time.Duration, n int) ([]plantstore.Subscriber, error) {
	if !c.open.Load() {
		return nil, nil
	}
	return c.WebhookStore.ClaimSubscribers(ctx, owner, lease, n)
}

// A subscriber that hangs holds one worker; the others are served.
func TestSlowSubscriberDelaysNoOther(t *testing.T) {
	f := start(t, fast)
	release := make(chan struct{})
	defer close(release)
	slow, _ := f.subscribe(func(int, delivery) (int, http.Header) {
		<-release
		return http.StatusOK, nil
	})
	quick, _ := f.subscribe(nil)
	begin := time.Now()
	f.create(1, 2, 3)
	eventually(t, "the quick subscriber's deliveries", func() bool { return len(quick.deliveries()) == 3 })
	if took := time.Since(begin); took > time.Second {
		t.Errorf("the quick subscriber waited %v behind the slow one", took)
	}
	// Its three plants go side by side: a request for each arrives while
	// none has been answered. (Plant 3 may miss the first window, read
	// before its create: then it goes in a later one, beside the retries
	// of 1 and 2, so which arrives third is not fixed.)
	eventually(t, "the slow subscriber's requests for plants 1, 2 and 3", func() bool {
		ids := slow.plantIDs()
		return slices.Contains(ids, 1) && slices.Contains(ids, 2) && slices.Contains(ids, 3)
	})
	// One after another, each hanging for the client's 2 s timeout,
	// plant 3 would come after 4 s.
	if took := time.Since(begin); took > 3500*time.Millisecond {
		t.Errorf("the slow subscriber's plants 1, 2 and 3 all requested only after %v: not side by side", took.Round(time.Millisecond))
	}
}

func TestReplaysAndConflictsAnnounceNothing(t *testing.T) {
	f := start(t, fast)
	r, sub := f.subscribe(nil)
	f.create(1)
	f.create(1) // a replay
	if _, err := f.store.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "other"}); plantstore.ErrorCode(err) != plantstore.ECONFLICT {
		t.Fatalf("conflict: %v", err)
	}
	// The replay and the conflict enqueued nothing (so nothing more can
	// be sent): one delivery in all, which arrives.
	if s := f.subscriber(sub.ID); s.Pending+s.Delivered+s.Failed != 1 {
		t.Errorf("after a create, a replay and a conflict: %+v, want one delivery in all", s)
	}
	eventually(t, "the delivery", func() bool { return f.subscriber(sub.ID).Delivered == 1 })
	if got := r.plantIDs(); !slices.Equal(got, []int64{1}) {
		t.Errorf("received %v, want plant 1 once", got)
	}
}

func TestDeliveryBody(t *testing.T) {
	tag := "a<b"
	at := time.Date(2026, 11, 23, 20, 45, 0, 123_000_000, time.FixedZone("x", 3600))
	for _, tc := range []struct {
		d    plantstore.Delivery
		want string
	}{
		{plantstore.Delivery{EventType: plantstore.EventCreated, Seq: 4, CreatedAt: at, Plant: plantstore.Plant{ID: 7, Name: "moss"}}, `{"id":7,"name":"moss"}`},
		{plantstore.Delivery{EventType: plantstore.EventUpdated, Seq: 42, CreatedAt: at, Plant: plantstore.Plant{ID: 7, Name: "moss", Tag: &tag}},
			`{"id":42,"type":"plant.updated","time":"2026-11-23T19:45:00.123Z","plant":{"id":7,"name":"moss","tag":"a<b"}}`},
		{plantstore.Delivery{EventType: plantstore.EventDeleted, Seq: 43, CreatedAt: at, Plant: plantstore.Plant{ID: -1, Name: "fern"}},
			`{"id":43,"type":"plant.deleted","time":"2026-11-23T19:45:00.123Z","plant":{"id":-1,"name":"fern"}}`},
	} {
		if got := string(webhook.DeliveryBody(tc.d)); got != tc.want {
			t.Errorf("DeliveryBody(%+v) = %s, want %s", tc.d, got, tc.want)
		}
	}
}

func TestEventBody(t *testing.T) {
	tag := "a<b&c"
	for _, tc := range []struct {
		p    plantstore.Plant
		want string
	}{
		{plantstore.Plant{ID: -9223372036854775808, Name: "fern"}, `{"id":-9223372036854775808,"name":"fern"}`},
		{plantstore.Plant{ID: 7, Name: "moss", Tag: &tag}, `{"id":7,"name":"moss","tag":"a<b&c"}`},
	} {
		if got := string(webhook.EventBody(tc.p)); got != tc.want {
			t.Errorf("EventBody(%v) = %s, want %s", tc.p, got, tc.want)
		}
	}
}

// Concurrent attempts to one subscriber reuse their connections: no more
// are opened than attempts are in flight at once.
func TestReusesConnections(t *testing.T) {
	const concurrency = 8
	f := startWith(t, webhook.DispatcherConfig{Schedule: fast, Concurrency: concurrency})
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	var conns, got atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(2 * time.Millisecond)
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	sub, err := f.store.AddSubscriber(context.Background(), srv.URL+"/hook", secret)
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 400; id++ {
		f.create(id)
	}
	eventually(t, "400 deliveries", func() bool { return f.subscriber(sub.ID).Delivered == 400 })
	// The client the dispatcher was given keeps DefaultConcurrency idle
	// connections per host, more than the 8 in flight here. A request that
	// starts just before another's connection is back in the pool dials
	// anew (Go's transport keeps the spare), so a loaded machine may see a
	// few more than 8 (10, once, in CI); without reuse it would be 400.
	if n := conns.Load(); n > 2*concurrency {
		t.Errorf("%d connections opened for %d deliveries, %d at a time; want them reused", n, got.Load(), concurrency)
	}
}

// While clients' requests are in flight (Busy), deliveries wait: none is
// sent while the dispatcher keeps finding the server busy, and all go once
// it is not.
func TestDefersToClientsWhileBusy(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	asked := make(chan struct{}, 1000)
	f := startWith(t, webhook.DispatcherConfig{Schedule: fast, MaxDefer: time.Hour, Busy: func() bool {
		select {
		case asked <- struct{}{}:
		default:
		}
		return busy.Load()
	}})
	r, _ := f.subscribe(nil)
	f.create(1, 2, 3)
	// The dispatcher asked again and again, and found the server busy.
	for range 20 {
		select {
		case <-asked:
		case <-time.After(5 * time.Second):
			t.Fatal("the dispatcher never asked whether the server is busy")
		}
	}
	if n := len(r.deliveries()); n != 0 {
		t.Fatalf("%d deliveries sent while the server was busy", n)
	}
	busy.Store(false)
	eventually(t, "three deliveries once the server is idle", func() bool { return len(r.deliveries()) == 3 })
}

// A server that stays busy still gets its deliveries out: each window
// waits MaxDefer, asking Busy again and again, then sends Concurrency
// deliveries at most before it asks again.
func TestDeliversUnderEndlessLoadAfterMaxDefer(t *testing.T) {
	const concurrency, maxDefer = 2, 50 * time.Millisecond
	var mu sync.Mutex
	var trace []string // "busy?" and "delivery", in the order they happened
	var firstAsked time.Time
	f := startWith(t, webhook.DispatcherConfig{Schedule: fast, MaxDefer: maxDefer, Concurrency: concurrency,
		Busy: func() bool {
			mu.Lock()
			defer mu.Unlock()
			if firstAsked.IsZero() {
				firstAsked = time.Now()
			}
			trace = append(trace, "busy?")
			return true
		}})
	r, _ := f.subscribe(func(int, delivery) (int, http.Header) {
		mu.Lock()
		defer mu.Unlock()
		trace = append(trace, "delivery")
		return http.StatusNoContent, nil
	})
	f.create(1, 2, 3, 4, 5)
	eventually(t, "five deliveries under endless load", func() bool { return len(r.deliveries()) == 5 })
	mu.Lock()
	defer mu.Unlock()
	if first := r.deliveries()[0].at; first.Sub(firstAsked) < maxDefer {
		t.Errorf("the first delivery went %s after the dispatcher found the server busy, want MaxDefer (%s) at least",
			first.Sub(firstAsked), maxDefer)
	}
	// Between two looks at Busy, one window: Concurrency deliveries at most.
	run, windows := 0, 0
	for _, e := range trace {
		if e == "busy?" {
			run = 0
			continue
		}
		if run++; run == 1 {
			windows++
		}
		if run > concurrency {
			t.Fatalf("%d deliveries between two looks at Busy, want %d at most: %v", run, concurrency, trace)
		}
	}
	if windows < 3 {
		t.Errorf("five deliveries in %d windows, want three at least (of %d): %v", windows, concurrency, trace)
	}
}

// Run returns once its context ends, whenever that is: a worker that
// reports its progress while the loop is not listening must not keep
// the shutdown waiting for it.
func TestRunReturnsWhileWorkersReport(t *testing.T) {
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "plants.db"), sqlite.Options{SoleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f := &fixture{t: t, store: store}
	for range 12 {
		f.subscribe(nil)
	}
	client := webhook.NewClient(webhook.ClientOptions{AllowPrivate: true, Timeout: 2 * time.Second})
	wake := make(chan struct{}, 1)
	next := int64(0)
	for round := range 16 {
		disp, err := webhook.NewDispatcher(webhook.DispatcherConfig{Store: store, Client: client,
			Poll: time.Millisecond, Wake: wake, Workers: 2, Schedule: fast})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { disp.Run(ctx); close(done) }()
		for range 20 {
			next++
			f.create(next)
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		// The loop takes at most one report a claim, and claims every 10 to
		// 100 ms: a few hundred milliseconds in, reports are waiting.
		time.Sleep(time.Duration(round) * 30 * time.Millisecond)
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Run did not return 10 s after its context ended", round)
		}
	}
}

// With more subscribers due than workers, they take turns: a healthy
// subscriber gets its deliveries while dead ones, with lower ids and
// always something due (a new plant every 20 ms), hold every worker
// with attempts that time out. It waits a turn and a timeout at most,
// not for ever.
func TestSubscribersTakeTurnsForTheWorkers(t *testing.T) {
	f := start(t, fast) // 4 workers, attempts time out after 2 s
	release := make(chan struct{})
	defer close(release)
	for range 5 {
		f.subscribe(func(int, delivery) (int, http.Header) {
			<-release
			return http.StatusOK, nil
		})
	}
	healthy, _ := f.subscribe(nil)
	stop := make(chan struct{})
	created := make(chan time.Time, 1000)
	var creates sync.WaitGroup
	creates.Go(func() {
		for id := int64(1); ; id++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			f.create(id)
			created <- time.Now()
		}
	})
	time.Sleep(10 * time.Second)
	close(stop)
	creates.Wait()
	close(created)
	var times []time.Time
	for at := range created {
		times = append(times, at)
	}
	got := healthy.plantIDs()
	if len(got) == 0 {
		t.Fatalf("the healthy subscriber got nothing in 10 s of %d creates while 5 dead ones held the 4 workers", len(times))
	}
	// Every plant created up to 7 s before the end has reached it: its
	// turn in the rotation, behind two turns of dead ones (each a turn's
	// second and a 2 s timeout), and then some, for a busy machine.
	have := map[int64]bool{}
	for _, id := range got {
		have[int64(id)] = true
	}
	end := times[len(times)-1]
	for i, at := range times {
		if id := int64(i + 1); end.Sub(at) > 7*time.Second && !have[id] {
			t.Fatalf("plant %d, created %v before the end, has not reached the healthy subscriber (%d of %d did)", id, end.Sub(at).Round(time.Millisecond), len(got), len(times))
		}
	}
}

// countedReleases counts the leases given back while results are
// recorded.
type countedReleases struct {
	plantstore.WebhookStore
	releases atomic.Int64
}

func (c *countedReleases) RecordAttempts(ctx context.Context, owner string, subscriberID int64, results []plantstore.AttemptResult, lease time.Duration, release bool) (bool, error) {
	if release {
		c.releases.Add(1)
	}
	return c.WebhookStore.RecordAttempts(ctx, owner, subscriberID, results, lease, release)
}

// With a worker free, no subscriber waits for one: a turn that ends goes
// on, and a subscriber with deliveries coming all the time keeps its
// worker (giving it back cost it two thirds of its deliveries under a
// saturating load: BENCHMARKS.md). With every worker busy, turns are
// taken (TestSubscribersTakeTurnsForTheWorkers).
func TestTurnGoesOnWhileAWorkerIsFree(t *testing.T) {
	counted := &countedReleases{}
	f := startWrapped(t, webhook.DispatcherConfig{Schedule: fast},
		func(s plantstore.WebhookStore) plantstore.WebhookStore { counted.WebhookStore = s; return counted })
	r, _ := f.subscribe(func(int, delivery) (int, http.Header) {
		time.Sleep(5 * time.Millisecond)
		return http.StatusOK, nil
	})
	// Deliveries due all the time for 4.5 s: four turns and a half. (A
	// busy machine may leave a window with nothing due once, which ends
	// the service too.)
	began := time.Now()
	for id := int64(1); time.Since(began) < 4500*time.Millisecond; id++ {
		f.create(id)
		time.Sleep(10 * time.Millisecond)
	}
	if n := counted.releases.Load(); n > 1 {
		t.Errorf("the subscriber was given back %d times in 4.5 s with 3 of 4 workers free; want its turn to go on", n)
	}
	if len(r.deliveries()) == 0 {
		t.Fatal("nothing was delivered: the test tested nothing")
	}
}

// At debug level each turn is logged: the claim, and the giving back with
// why (here, nothing more was due; then, a 410 that disabled it).
func TestTurnsLoggedAtDebugLevel(t *testing.T) {
	logs := &syncBuffer{}
	f := startWith(t, webhook.DispatcherConfig{Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Schedule: fast})
	var gone atomic.Bool
	_, sub := f.subscribe(func(int, delivery) (int, http.Header) {
		if gone.Load() {
			return http.StatusGone, nil
		}
		return http.StatusOK, nil
	})
	f.create(1)
	eventually(t, "plant 1 delivered and the subscriber given back", func() bool {
		return f.subscriber(sub.ID).Delivered == 1 && strings.Contains(logs.String(), `"why":"nothing due"`)
	})
	gone.Store(true)
	f.create(2)
	eventually(t, "the subscriber given back, disabled", func() bool {
		return strings.Contains(logs.String(), `"msg":"webhook subscriber given back","subscriber":`+strconv.FormatInt(sub.ID, 10)) &&
			strings.Contains(logs.String(), `"why":"disabled"`)
	})
	if n := strings.Count(logs.String(), `"msg":"webhook subscriber claimed"`); n < 2 {
		t.Errorf("%d claims logged, want 2 at least:\n%s", n, logs)
	}
}

// A slow attempt holds up its own plant only: while a receiver holds plant
// 1's first event, the events of other plants created after it (so not in
// the read that found plant 1's), and a retry that falls due, all arrive;
// plant 1's later events wait for its first and follow it in order.
// (Before the dispatcher was pipelined, a worker read its next window only
// once every attempt of the last had ended: they all waited.)
func TestSlowAttemptHoldsUpOnlyItsPlant(t *testing.T) {
	// Attempts time out after 10 s: plant 1's is held until the test
	// releases it, 8 s at most.
	f := startWith(t, webhook.DispatcherConfig{Schedule: fast,
		Client: webhook.NewClient(webhook.ClientOptions{AllowPrivate: true, Timeout: 10 * time.Second})})
	const others = 30
	arrived, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseIt := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseIt()
	var arrivedOnce sync.Once
	var held atomic.Bool // plant 1's first attempt is held, unanswered
	var failedOnce atomic.Bool
	r, sub := f.subscribeTo(plantstore.EventTypes, func(_ int, d delivery) (int, http.Header) {
		id := d.plant["id"].(float64)
		switch {
		case id == 1 && d.typ == plantstore.EventCreated:
			held.Store(true)
			arrivedOnce.Do(func() { close(arrived) })
			select {
			case <-release:
			case <-time.After(8 * time.Second): // within the client's timeout
			}
			held.Store(false)
		case id == 1:
			if held.Load() {
				t.Errorf("plant 1's %s arrived while its create was in flight", d.typ)
			}
		case id == 2 && failedOnce.CompareAndSwap(false, true):
			return http.StatusServiceUnavailable, nil // retried 50 ms on
		}
		return http.StatusOK, nil
	})
	ctx := context.Background()
	f.create(1)
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("plant 1's event never arrived")
	}
	// Enqueued after the read that found plant 1's create.
	if err := f.store.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "renamed"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.store.DeletePlant(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	for id := int64(2); id < 2+others; id++ {
		f.create(id)
	}
	// Every other plant's event (and plant 2's retry) arrives while plant
	// 1's attempt is held; the old dispatcher sent none before it ended.
	deadline := time.Now().Add(4 * time.Second)
	otherPlants := func() (got map[int64]int) {
		got = map[int64]int{}
		for _, id := range r.plantIDs() {
			if id != 1 {
				got[id]++
			}
		}
		return got
	}
	for {
		got := otherPlants()
		if len(got) == others && got[2] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("while plant 1's attempt was held 4 s more, %d of the %d other plants' events arrived (plant 2: %d attempts of 2): they waited behind it",
				len(got), others, got[2])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !held.Load() {
		t.Fatal("plant 1's attempt was no longer held: the test tested nothing")
	}
	releaseIt()
	eventually(t, "every event delivered", func() bool { return f.subscriber(sub.ID).Delivered == 3+others })
	var one []string
	for _, d := range r.deliveries() {
		if d.plant["id"] == float64(1) {
			one = append(one, d.typ)
		}
	}
	if got := fmt.Sprint(one); got != "[plant.created plant.updated plant.deleted]" {
		t.Errorf("plant 1's events arrived as %s, want its create, update and delete in order", got)
	}
}

// However the attempts interleave, a plant never has two in flight, and
// none of its events arrives before the earlier ones were answered 2xx:
// plants side by side, a receiver that answers at random speeds and
// refuses some attempts, so that chains end at different times and the
// dispatcher reads again while others are in flight.
func TestNoPlantTwiceInFlight(t *testing.T) {
	const concurrency, plants, updates = 8, 16, 6
	f := startWith(t, webhook.DispatcherConfig{Schedule: fast, Concurrency: concurrency})
	var mu sync.Mutex
	inFlight := map[int64]bool{}
	delivered := map[int64][]int64{} // plant: the seqs answered 2xx, in order
	var n atomic.Int64
	_, sub := f.subscribeTo(plantstore.EventTypes, func(_ int, d delivery) (int, http.Header) {
		id := int64(d.plant["id"].(float64))
		seq, err := strconv.ParseInt(d.seq, 10, 64)
		if err != nil {
			t.Errorf("%s %q: %v", webhook.HeaderEventID, d.seq, err)
		}
		mu.Lock()
		if inFlight[id] {
			t.Errorf("plant %d: event %d arrived while another of its events was in flight", id, seq)
		}
		if done := delivered[id]; len(done) > 0 && done[len(done)-1] >= seq {
			t.Errorf("plant %d: event %d arrived after event %d was delivered", id, seq, done[len(done)-1])
		}
		inFlight[id] = true
		mu.Unlock()
		time.Sleep(time.Duration(n.Add(1)*7%20) * time.Millisecond)
		status := http.StatusOK
		if n.Load()%5 == 0 {
			status = http.StatusServiceUnavailable
		}
		mu.Lock()
		inFlight[id] = false
		if status == http.StatusOK {
			delivered[id] = append(delivered[id], seq)
		}
		mu.Unlock()
		return status, nil
	})
	ctx := context.Background()
	var wg sync.WaitGroup
	for id := int64(1); id <= plants; id++ {
		wg.Go(func() {
			if _, err := f.store.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "a"}); err != nil {
				t.Error(err)
			}
			for i := range updates {
				if err := f.store.UpdatePlant(ctx, plantstore.Plant{ID: id, Name: fmt.Sprint(i)}, nil); err != nil {
					t.Error(err)
				}
				time.Sleep(3 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	eventually(t, "every event delivered", func() bool { return f.subscriber(sub.ID).Delivered == plants*(1+updates) })
	mu.Lock()
	defer mu.Unlock()
	for id := int64(1); id <= plants; id++ {
		if got := len(delivered[id]); got != 1+updates {
			t.Errorf("plant %d: %d events delivered, want %d", id, got, 1+updates)
		}
	}
}

// A subscriber removed (by webhook remove, in another process) while a
// long chain of one plant's events goes to it gets nothing more within
// maxRecordDelay and the attempt then in flight: each record checks the
// lease the removal took away. Before, the chain went on for seconds,
// until 1,024 results or the lease's renewal were recorded.
func TestRemovedSubscriberGetsNothingMore(t *testing.T) {
	// A window of 64 (16 a slot): the backlog fills it, so the worker
	// reads nothing more until the chain of 64 ends.
	f := startWith(t, webhook.DispatcherConfig{Schedule: fast, Concurrency: 4})
	backlog := make(chan struct{})
	r, sub := f.subscribeTo(plantstore.EventTypes, func(n int, _ delivery) (int, http.Header) {
		if n == 1 {
			<-backlog // the updates are all read at once, as one chain, after this
		}
		time.Sleep(20 * time.Millisecond)
		return http.StatusNoContent, nil
	})
	ctx := context.Background()
	f.create(1)
	eventually(t, "the create's delivery under way", func() bool { return len(r.deliveries()) == 1 })
	for i := range 300 { // chains of 64, 1.3 s each
		if err := f.store.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: fmt.Sprint("name ", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	close(backlog)
	eventually(t, "deliveries under way", func() bool { return len(r.deliveries()) >= 20 })
	if err := f.store.RemoveSubscriber(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	time.Sleep(time.Second)
	var late int
	for _, d := range r.deliveries() {
		if d.at.After(removed.Add(400 * time.Millisecond)) {
			late++
		}
	}
	if late > 0 {
		t.Errorf("%d deliveries reached the subscriber more than 400 ms after it was removed (of %d)", late, len(r.deliveries()))
	}
}
