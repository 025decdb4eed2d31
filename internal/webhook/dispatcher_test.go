package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
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
	plant         map[string]any
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
	d := delivery{id: req.Header.Get("webhook-id"), timestamp: req.Header.Get("webhook-timestamp"), at: time.Now()}
	if err := json.Unmarshal(body, &d.plant); err != nil {
		r.t.Errorf("delivery body %q: %v", body, err)
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
	client := webhook.NewClient(webhook.ClientOptions{AllowPrivate: true, Timeout: 2 * time.Second})
	f.disp, err = webhook.NewDispatcher(webhook.DispatcherConfig{
		Store: f.store, Client: client, Schedule: schedule,
		Poll: 20 * time.Millisecond, Wake: f.wake, Workers: 4,
	})
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

var fast = webhook.Schedule{Intervals: []time.Duration{50 * time.Millisecond}, MaxAge: time.Minute}

func (f *fixture) subscribe(answer func(n int, d delivery) (int, http.Header)) (*receiver, plantstore.Subscriber) {
	f.t.Helper()
	secret, err := webhook.NewSecret()
	if err != nil {
		f.t.Fatal(err)
	}
	r := newReceiver(f.t, secret, answer)
	sub, err := f.store.AddSubscriber(context.Background(), r.srv.URL+"/hooks/plants?source=test", secret)
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

func TestDeliversEachNewPlantSignedAndInOrder(t *testing.T) {
	f := start(t, fast)
	r, sub := f.subscribe(nil)
	tag := "green"
	if _, err := f.store.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "fern", Tag: &tag}); err != nil {
		t.Fatal(err)
	}
	f.create(2, 3, 4, 5)
	eventually(t, "five deliveries", func() bool { return len(r.deliveries()) == 5 })
	if got := r.plantIDs(); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Errorf("received plants %v, want creation order 1..5", got)
	}
	first := r.deliveries()[0]
	want := map[string]any{"id": float64(1), "name": "fern", "tag": "green"}
	if fmt.Sprint(first.plant) != fmt.Sprint(want) {
		t.Errorf("body %v, want the NewPlant %v", first.plant, want)
	}
	if _, ok := r.deliveries()[1].plant["tag"]; ok {
		t.Errorf("a plant without a tag was sent with one: %v", r.deliveries()[1].plant)
	}
	eventually(t, "the deliveries counted", func() bool { s := f.subscriber(sub.ID); return s.Delivered == 5 && s.Pending == 0 })
	if st := f.disp.Stats(); st.Attempts != 5 || st.Delivered != 5 {
		t.Errorf("stats %+v, want 5 attempts, 5 delivered", st)
	}
}

func TestRetriesUntilSuccessWithTheSameID(t *testing.T) {
	f := start(t, fast)
	r, sub := f.subscribe(func(n int, _ delivery) (int, http.Header) {
		if n <= 2 {
			return http.StatusInternalServerError, nil
		}
		return http.StatusOK, nil
	})
	f.create(1)
	eventually(t, "the third attempt", func() bool { return f.subscriber(sub.ID).Delivered == 1 })
	ds := r.deliveries()
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

// A failing delivery holds back the ones behind it, so order survives an
// outage of the receiver.
func TestOrderSurvivesFailures(t *testing.T) {
	f := start(t, fast)
	r, sub := f.subscribe(func(n int, _ delivery) (int, http.Header) {
		if n <= 3 {
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusOK, nil
	})
	f.create(1, 2, 3)
	eventually(t, "all three delivered", func() bool { return f.subscriber(sub.ID).Delivered == 3 })
	if got := r.plantIDs(); !slices.Equal(got, []int64{1, 1, 1, 1, 2, 3}) {
		t.Errorf("arrivals %v, want plant 1 three times failed, then 1, 2, 3", got)
	}
}

func TestGoneDisablesTheSubscriber(t *testing.T) {
	f := start(t, fast)
	r, sub := f.subscribe(func(int, delivery) (int, http.Header) { return http.StatusGone, nil })
	f.create(1, 2)
	eventually(t, "the subscriber disabled", func() bool { return f.subscriber(sub.ID).DisabledAt != nil })
	s := f.subscriber(sub.ID)
	if s.Pending != 0 || s.Failed != 2 || s.Delivered != 0 {
		t.Errorf("after 410: %+v, want its 2 deliveries failed", s)
	}
	f.create(3)
	time.Sleep(200 * time.Millisecond)
	if n := len(r.deliveries()); n != 1 {
		t.Errorf("%d requests reached a subscriber that answered 410, want 1", n)
	}
	if st := f.disp.Stats(); st.Disabled != 1 {
		t.Errorf("stats %+v, want one disabled", st)
	}
}

func TestGivesUpAfterMaxAge(t *testing.T) {
	f := start(t, webhook.Schedule{Intervals: []time.Duration{50 * time.Millisecond}, MaxAge: 300 * time.Millisecond})
	// Plant 1 fails until it is given up; then plant 2 goes through.
	_, sub := f.subscribe(func(_ int, d delivery) (int, http.Header) {
		if d.plant["id"] == float64(1) {
			return http.StatusBadGateway, nil
		}
		return http.StatusOK, nil
	})
	f.create(1, 2)
	eventually(t, "plant 1 given up and plant 2 delivered", func() bool {
		s := f.subscriber(sub.ID)
		return s.Failed == 1 && s.Delivered == 1
	})
	// Plant 2's delivery cleared the error of plant 1's; Failed keeps count.
	if s := f.subscriber(sub.ID); s.LastError != "" || s.State() != plantstore.SubscriberActive || s.Pending != 0 {
		t.Errorf("after giving up, then delivering: %+v", s)
	}
	c, err := f.store.CountDeliveries(context.Background())
	if err != nil || c != (plantstore.DeliveryCounts{Delivered: 1, Failed: 1}) {
		t.Errorf("CountDeliveries = %+v, %v", c, err)
	}
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
	eventually(t, "the slow subscriber's first request", func() bool { return len(slow.deliveries()) >= 1 })
	time.Sleep(100 * time.Millisecond)
	if n := len(slow.deliveries()); n != 1 {
		t.Errorf("the slow subscriber got %d requests while its first hangs, want 1", n)
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
	eventually(t, "the delivery", func() bool { return f.subscriber(sub.ID).Delivered == 1 })
	time.Sleep(100 * time.Millisecond)
	if got := r.plantIDs(); !slices.Equal(got, []int64{1}) {
		t.Errorf("received %v, want plant 1 once", got)
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
