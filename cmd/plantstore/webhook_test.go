package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
	"github.com/plantstore/plantstore/internal/webhook"
)

// These tests run the built binary with real receivers on loopback, so
// serve runs with --allow-private-webhooks, except where the refusal is
// what is tested.

// receiver is a webhook subscriber's endpoint. It verifies every request
// as a real one would, records it, and answers as told. It can go down and
// come back on the same port.
type receiver struct {
	t    *testing.T
	addr string

	mu      sync.Mutex
	key     []byte
	status  int              // the answer; 204 unless set
	refuse  func(event) bool // when set and true, the answer is 503
	hold    chan struct{}    // while non-nil, requests wait for it to close, or for their sender to go
	arrived chan struct{}    // a request arrived (buffered, never blocks)
	got     []event
	srv     *http.Server
}

// event is one request the receiver answered.
type event struct {
	id      string // webhook-id
	typ     string // plantstore-event-type
	seq     string // plantstore-event-id
	body    string
	plantID int64
	name    string
	status  int
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, addr: ln.Addr().String(), status: http.StatusNoContent, arrived: make(chan struct{}, 1000)}
	r.serveOn(ln)
	t.Cleanup(r.down)
	return r
}

func (r *receiver) url() string { return "http://" + r.addr + "/hooks/plants" }

// setSecret gives the receiver the secret that webhook add printed.
func (r *receiver) setSecret(secret string) {
	key, err := webhook.ParseSecret(strings.TrimSpace(secret))
	if err != nil {
		r.t.Fatalf("webhook add printed %q: %v", secret, err)
	}
	r.mu.Lock()
	r.key = key
	r.mu.Unlock()
}

func (r *receiver) answer(status int) {
	r.mu.Lock()
	r.status = status
	r.mu.Unlock()
}

func (r *receiver) serveOn(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(r.handle), ReadHeaderTimeout: 5 * time.Second}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go srv.Serve(ln)
}

// down stops listening: deliveries meet a refused connection.
func (r *receiver) down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// up listens again on the same port.
func (r *receiver) up() {
	r.t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.serveOn(ln)
}

func (r *receiver) handle(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	r.mu.Lock()
	key, hold := r.key, r.hold
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
	if hold != nil {
		select {
		case <-hold:
		case <-req.Context().Done():
		}
		if req.Context().Err() != nil {
			return // the sender went away (killed) while the request was held
		}
	}
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
		r.t.Errorf("webhook request %s with Content-Type %q", req.Method, req.Header.Get("Content-Type"))
	}
	if err := webhook.Verify(key, req.Header, body, time.Now(), time.Minute); err != nil {
		r.t.Errorf("webhook signature does not verify: %v (body %s)", err, body)
	}
	type plantJSON struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	var plant struct {
		plantJSON
		Plant *plantJSON `json:"plant"` // an update's or a delete's
	}
	if err := json.Unmarshal(body, &plant); err != nil {
		r.t.Errorf("webhook body %q: %v", body, err)
	}
	if plant.Plant != nil {
		plant.plantJSON = *plant.Plant
	}
	e := event{id: req.Header.Get("webhook-id"), typ: req.Header.Get(webhook.HeaderEventType), seq: req.Header.Get(webhook.HeaderEventID),
		body: string(body), plantID: plant.ID, name: plant.Name}
	r.mu.Lock()
	e.status = r.status
	if r.refuse != nil && r.refuse(e) {
		e.status = http.StatusServiceUnavailable
	}
	r.got = append(r.got, e)
	r.mu.Unlock()
	w.WriteHeader(e.status)
}

func (r *receiver) events() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// delivered lists the plants whose event the receiver accepted (2xx), in
// the order of acceptance, and how many times each event id was accepted.
func (r *receiver) delivered() (plants []int64, timesByID map[string]int) {
	timesByID = map[string]int{}
	for _, e := range r.events() {
		if e.status/100 == 2 {
			plants = append(plants, e.plantID)
			timesByID[e.id]++
		}
	}
	return plants, timesByID
}

// awaitDelivered waits until the receiver has accepted n events.
func (r *receiver) awaitDelivered(n int, timeout time.Duration, logs func() string) []int64 {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		plants, _ := r.delivered()
		if len(plants) >= n {
			return plants
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d of %d events delivered within %v: %v\n%s", len(plants), n, timeout, r.events(), logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// subscribe adds r as a subscriber of the store db (a path or URL) and
// returns the new subscriber's ID.
func subscribe(t *testing.T, dir, db string, r *receiver) string {
	t.Helper()
	res := cli(t, dir, nil, "webhook", "add", r.url(), "--db", db)
	if res.exit != 0 {
		t.Fatalf("webhook add: exit %d, %s", res.exit, res.stderr)
	}
	r.setSecret(res.stdout)
	m := regexp.MustCompile(`subscriber (\d+) `).FindStringSubmatch(res.stderr)
	if m == nil {
		t.Fatalf("webhook add said %q", res.stderr)
	}
	return m[1]
}

type subscriberJSON struct {
	ID          int64      `json:"id"`
	URL         string     `json:"url"`
	State       string     `json:"state"`
	DisabledAt  *time.Time `json:"disabled_at"`
	Pending     int64      `json:"pending"`
	Delivered   int64      `json:"delivered"`
	Failed      int64      `json:"failed"`
	LastError   string     `json:"last_error"`
	LastErrorAt *time.Time `json:"last_error_at"`
	NextProbe   *time.Time `json:"next_probe"`
}

func listSubscribers(t *testing.T, dir, db string) []subscriberJSON {
	t.Helper()
	res := cli(t, dir, nil, "webhook", "list", "--json", "--db", db)
	if res.exit != 0 {
		t.Fatalf("webhook list --json: exit %d, %s", res.exit, res.stderr)
	}
	var subs []subscriberJSON
	if err := json.Unmarshal([]byte(res.stdout), &subs); err != nil {
		t.Fatalf("webhook list --json printed %q: %v", res.stdout, err)
	}
	return subs
}

func plantBody(id int64) string { return fmt.Sprintf(`{"id":%d,"name":"plant %d"}`, id, id) }

var testWebhookFlags = []string{"--allow-private-webhooks", "--webhook-retry-schedule", "100ms", "--webhook-poll", "100ms"}

func TestWebhookCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mustToken(t, dir, "--name", "me") // makes the store: webhook add makes none
	for _, bad := range []string{"ftp://example.com/hook", "example.com/hook", "http://user:pw@example.com/hook", "https:///nohost", ""} {
		if res := cli(t, dir, nil, "webhook", "add", bad); res.exit != 2 || res.stdout != "" {
			t.Errorf("webhook add %q: exit %d, stdout %q; want 2 and nothing", bad, res.exit, res.stdout)
		}
	}
	res := cli(t, dir, nil, "webhook", "add", "https://hooks.example.com/plants?team=7")
	if res.exit != 0 || !regexp.MustCompile(`^whsec_[A-Za-z0-9+/]{43}=\n$`).MatchString(res.stdout) {
		t.Fatalf("webhook add: exit %d, stdout %q, stderr %q; want the secret alone", res.exit, res.stdout, res.stderr)
	}
	secret := strings.TrimSpace(res.stdout)
	if !strings.Contains(res.stderr, "shown only this once") {
		t.Errorf("webhook add's note: %q", res.stderr)
	}
	// Neither add nor list shows the path or query, where the subscriber's
	// own credentials often are; --full-urls shows them.
	if strings.Contains(res.stderr, "team=7") || strings.Contains(res.stderr, "/plants") || !strings.Contains(res.stderr, "https://hooks.example.com/…#") {
		t.Errorf("webhook add echoes %q; want the URL as scheme://host/…#hash", res.stderr)
	}
	cli(t, dir, nil, "webhook", "add", "http://second.example/hook")

	table := cli(t, dir, nil, "webhook", "list")
	if table.exit != 0 || strings.Contains(table.stdout, secret) || strings.Contains(table.stdout, "whsec_") {
		t.Fatalf("webhook list: exit %d, %q (must never show a secret)", table.exit, table.stdout)
	}
	for _, want := range []string{"ID", "PENDING", webhook.RedactURL("https://hooks.example.com/plants?team=7"), webhook.RedactURL("http://second.example/hook"), "active"} {
		if !strings.Contains(table.stdout, want) {
			t.Errorf("webhook list lacks %q:\n%s", want, table.stdout)
		}
	}
	if strings.Contains(table.stdout, "team=7") || strings.Contains(table.stdout, "com/plants") || strings.Contains(table.stdout, "example/hook") {
		t.Errorf("webhook list shows a path or query:\n%s", table.stdout)
	}
	subs := listSubscribers(t, dir, "plantstore.db")
	if len(subs) != 2 || subs[0].URL != webhook.RedactURL("https://hooks.example.com/plants?team=7") || subs[0].DisabledAt != nil ||
		subs[0].State != "active" || subs[0].LastError != "" || subs[0].LastErrorAt != nil {
		t.Fatalf("webhook list --json: %+v", subs)
	}
	full := cli(t, dir, nil, "webhook", "list", "--full-urls")
	if full.exit != 0 || !strings.Contains(full.stdout, "https://hooks.example.com/plants?team=7") || !strings.Contains(full.stdout, "http://second.example/hook") {
		t.Errorf("webhook list --full-urls: exit %d, %q", full.exit, full.stdout)
	}
	full = cli(t, dir, nil, "webhook", "list", "--full-urls", "--json")
	if !strings.Contains(full.stdout, `"url": "https://hooks.example.com/plants?team=7"`) {
		t.Errorf("webhook list --full-urls --json: %q", full.stdout)
	}

	if res := cli(t, dir, nil, "webhook", "remove", fmt.Sprint(subs[0].ID)); res.exit != 0 {
		t.Fatalf("webhook remove: exit %d, %s", res.exit, res.stderr)
	}
	if res := cli(t, dir, nil, "webhook", "remove", fmt.Sprint(subs[0].ID)); res.exit != 1 || !strings.Contains(res.stderr, "not found") {
		t.Errorf("removing it again: exit %d, %q; want 1, not found", res.exit, res.stderr)
	}
	if res := cli(t, dir, nil, "webhook", "remove", "first"); res.exit != 2 {
		t.Errorf("webhook remove first: exit %d, want 2", res.exit)
	}
	if subs := listSubscribers(t, dir, "plantstore.db"); len(subs) != 1 || subs[0].URL != webhook.RedactURL("http://second.example/hook") {
		t.Errorf("after remove: %+v", subs)
	}
	if res := cli(t, dir, nil, "webhook", "frobnicate"); res.exit != 2 {
		t.Errorf("unknown subcommand: exit %d", res.exit)
	}
	// The same URL again is allowed (a receiver rotating its secret), and
	// warned of: its events go to it twice.
	first := listSubscribers(t, dir, "plantstore.db")[0].ID
	if res := cli(t, dir, nil, "webhook", "add", "http://second.example/hook"); res.exit != 0 ||
		!strings.Contains(res.stderr, fmt.Sprintf("warning: subscriber %d has this URL too", first)) {
		t.Errorf("webhook add of a URL subscribed already: exit %d, stderr %q; want a warning naming subscriber %d", res.exit, res.stderr, first)
	}
	if res := cli(t, dir, nil, "webhook", "add", "http://third.example/hook"); res.exit != 0 || strings.Contains(res.stderr, "has this URL too") {
		t.Errorf("webhook add of a new URL: exit %d, stderr %q; want no warning of the same URL", res.exit, res.stderr)
	}
	// The scheme and host in capitals are the same endpoint; events they
	// do not share go to it once.
	second := listSubscribers(t, dir, "plantstore.db")
	res = cli(t, dir, nil, "webhook", "add", "HTTP://Second.Example/hook")
	if want := fmt.Sprintf("warning: subscribers %d and %d have this URL too", first, second[len(second)-2].ID); res.exit != 0 || !strings.Contains(res.stderr, want) {
		t.Errorf("webhook add of the URL in capitals: exit %d, stderr %q; want %q", res.exit, res.stderr, want)
	}
	if res := cli(t, dir, nil, "webhook", "add", "http://second.example/hook", "--events", "plant.deleted"); res.exit != 0 || strings.Contains(res.stderr, "this URL too") {
		t.Errorf("webhook add of the URL for other events: exit %d, stderr %q; want no warning", res.exit, res.stderr)
	}
}

// Every new plant, and only new plants, reach the subscriber, signed,
// once.
func TestWebhookDelivery(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	r := newReceiver(t)
	id := subscribe(t, dir, "plantstore.db", r)
	s := serve(t, dir, testWebhookFlags...)
	client := apitest.Client(t)

	for i := int64(1); i <= 5; i++ {
		if status, body := create(t, client, s.url, token, plantBody(i)); status != 200 {
			t.Fatalf("create %d: %d %s", i, status, body)
		}
	}
	// None of these stores a new plant, so none is announced.
	for _, tc := range []struct {
		token, body string
		want        int
	}{
		{token, plantBody(1), 200},              // a replay
		{token, `{"id":1,"name":"other"}`, 409}, // a conflict
		{token, `{"id":6,"name":""}`, 400},      // invalid
		{token, `{"id":"7","name":"x"}`, 400},   // id not a number
		{"pst_wrong", plantBody(8), 401},        // bad token
	} {
		if status, body := create(t, client, s.url, tc.token, tc.body); status != tc.want {
			t.Errorf("POST %s: %d %s, want %d", tc.body, status, body, tc.want)
		}
	}
	r.awaitDelivered(5, 10*time.Second, s.logs.String)
	time.Sleep(500 * time.Millisecond) // time for any wrong event to arrive
	plants, times := r.delivered()
	// Different plants go side by side: in any order.
	if !slices.Equal(slices.Sorted(slices.Values(plants)), []int64{1, 2, 3, 4, 5}) {
		t.Errorf("delivered plants %v, want 1..5 once each", plants)
	}
	for id, n := range times {
		if n != 1 || !strings.HasPrefix(id, "msg_") {
			t.Errorf("event %q delivered %d times", id, n)
		}
	}
	for _, e := range r.events() {
		if e.name != fmt.Sprintf("plant %d", e.plantID) {
			t.Errorf("event's plant: %+v", e)
		}
	}
	subs := listSubscribers(t, dir, "plantstore.db")
	if len(subs) != 1 || fmt.Sprint(subs[0].ID) != id || subs[0].Delivered != 5 || subs[0].Pending != 0 || subs[0].Failed != 0 {
		t.Errorf("webhook list after delivery: %+v", subs)
	}
	if logs := s.logs.String(); !strings.Contains(logs, `"msg":"webhook delivered"`) || !strings.Contains(logs, `"subscriber":`+id) {
		t.Errorf("no per-attempt log line:\n%s", logs)
	}
}

// A subscriber URL that carries its secret in the path (as Slack's and
// Discord's do) or in the query shows neither in serve's log, at debug
// level, through a failed attempt and a delivery, nor in what webhook add
// and webhook list print.
func TestWebhookURLSecretsStayOutOfLogs(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	r := newReceiver(t)
	r.answer(http.StatusInternalServerError)
	const pathSecret, querySecret = "B0PATHSECRET42", "QUERYSECRET42"
	url := "http://" + r.addr + "/services/T0/" + pathSecret + "?token=" + querySecret
	add := cli(t, dir, nil, "webhook", "add", url)
	if add.exit != 0 {
		t.Fatalf("webhook add: exit %d, %s", add.exit, add.stderr)
	}
	r.setSecret(add.stdout)
	s := serve(t, dir, append([]string{"--log-level", "debug"}, testWebhookFlags...)...)
	if status, body := create(t, apitest.Client(t), s.url, token, plantBody(1)); status != 200 {
		t.Fatalf("create: %d %s", status, body)
	}
	awaitLog := func(msg string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(s.logs.String(), msg) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q logged:\n%s", msg, s.logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	awaitLog(`"msg":"webhook attempt failed"`)
	r.answer(http.StatusNoContent)
	r.awaitDelivered(1, 10*time.Second, s.logs.String)
	awaitLog(`"msg":"webhook delivered"`) // log lines are written in batches
	list := cli(t, dir, nil, "webhook", "list")
	listJSON := cli(t, dir, nil, "webhook", "list", "--json")
	logs := s.logs.String()
	if !strings.Contains(logs, `"msg":"webhook delivered"`) || !strings.Contains(logs, webhook.RedactURL(url)) {
		t.Errorf("the log lacks the delivery or the redacted URL %s:\n%s", webhook.RedactURL(url), logs)
	}
	for what, out := range map[string]string{"serve's log": logs, "webhook add": add.stdout + add.stderr,
		"webhook list": list.stdout + list.stderr, "webhook list --json": listJSON.stdout + listJSON.stderr} {
		for _, secret := range []string{pathSecret, querySecret, "/services/"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s shows %q:\n%s", what, secret, out)
			}
		}
	}
}

// Deliveries wait out a receiver that is down across a restart of the
// service, and survive a SIGKILL of the service.
func TestWebhooksSurviveRestartAndKill(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	r := newReceiver(t)
	subscribe(t, dir, "plantstore.db", r)
	r.down()

	s := serve(t, dir, testWebhookFlags...)
	client := apitest.Client(t)
	for i := int64(1); i <= 5; i++ {
		if status, body := create(t, client, s.url, token, plantBody(i)); status != 200 {
			t.Fatalf("create %d: %d %s", i, status, body)
		}
	}
	awaitLog(t, s, `"msg":"webhook attempt failed"`)
	if code := s.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	if subs := listSubscribers(t, dir, "plantstore.db"); subs[0].Pending != 5 || !strings.Contains(subs[0].LastError, "refused") {
		t.Errorf("while the receiver is down: %+v", subs[0])
	}

	r.up()
	s = serveProcess(t, dir, testWebhookFlags...) // killed below
	if plants := r.awaitDelivered(5, 10*time.Second, s.logs.String); !slices.Equal(slices.Sorted(slices.Values(plants)), []int64{1, 2, 3, 4, 5}) {
		t.Errorf("after the restart: delivered %v, want 1..5", plants)
	}

	// Now the receiver fails every attempt, and the service is killed with
	// deliveries pending.
	r.answer(http.StatusServiceUnavailable)
	for i := int64(6); i <= 10; i++ {
		if status, body := create(t, client, s.url, token, plantBody(i)); status != 200 {
			t.Fatalf("create %d: %d %s", i, status, body)
		}
	}
	awaitLog(t, s, `"status":503`)
	s.kill(t)
	r.answer(http.StatusOK)
	s = serve(t, dir, testWebhookFlags...)
	plants := r.awaitDelivered(10, 10*time.Second, s.logs.String)
	if !slices.Equal(slices.Sorted(slices.Values(plants)), []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
		t.Errorf("after SIGKILL and restart: delivered %v, want 1..10, once each", plants)
	}
}

// A subscriber added while the service runs gets the plants created after
// it; one that fails twice gets the event on the third attempt, with the
// same webhook-id each time.
func TestWebhookRetriesUntilDelivered(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	s := serve(t, dir, testWebhookFlags...)
	client := apitest.Client(t)
	create(t, client, s.url, token, plantBody(1)) // before any subscriber: no event

	r := newReceiver(t)
	r.answer(http.StatusInternalServerError)
	subscribe(t, dir, "plantstore.db", r)
	create(t, client, s.url, token, plantBody(2))
	for len(r.events()) < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	r.answer(http.StatusOK)
	r.awaitDelivered(1, 10*time.Second, s.logs.String)
	time.Sleep(300 * time.Millisecond)
	events := r.events()
	if len(events) != 3 {
		t.Fatalf("%d attempts, want 2 failed and 1 delivered: %+v", len(events), events)
	}
	for _, e := range events {
		if e.plantID != 2 || e.id != events[0].id {
			t.Errorf("attempt %+v; want plant 2 with webhook-id %s every time", e, events[0].id)
		}
	}
	if n := countLines(s.logs.String(), `"msg":"webhook attempt failed"`); n != 2 {
		t.Errorf("%d failed attempts logged, want 2", n)
	}
	if !strings.Contains(s.logs.String(), `"next_attempt":`) {
		t.Errorf("a failed attempt's log does not say when it is retried:\n%s", s.logs)
	}
	// The delivery cleared the failed attempts' error.
	subs := listSubscribers(t, dir, "plantstore.db")
	if subs[0].Delivered != 1 || subs[0].Pending != 0 || subs[0].State != "active" || subs[0].LastError != "" || subs[0].LastErrorAt != nil {
		t.Errorf("webhook list: %+v", subs[0])
	}
}

// A receiver that is down is paused, and webhook list says so and when
// the next probe goes; once it answers, the backlog goes.
func TestWebhookReceiverDownIsShown(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	r := newReceiver(t)
	r.answer(http.StatusServiceUnavailable)
	subscribe(t, dir, "plantstore.db", r)
	s := serve(t, dir, "--allow-private-webhooks", "--webhook-retry-schedule", "2s", "--webhook-poll", "100ms")
	client := apitest.Client(t)
	for i := int64(1); i <= 12; i++ {
		create(t, client, s.url, token, plantBody(i))
	}
	awaitLog(t, s, `"msg":"webhook receiver down; its deliveries wait, and one probe goes at next_probe"`)
	subs := listSubscribers(t, dir, "plantstore.db")
	if subs[0].State != "down" || subs[0].NextProbe == nil || time.Until(*subs[0].NextProbe) > 3*time.Second || subs[0].Pending != 12 || subs[0].Failed != 0 {
		t.Errorf("webhook list while the receiver is down: %+v", subs[0])
	}
	if table := cli(t, dir, nil, "webhook", "list"); !strings.Contains(table.stdout, " down ") || !strings.Contains(table.stdout, "NEXT PROBE") {
		t.Errorf("webhook list does not show it down:\n%s", table.stdout)
	}
	r.answer(http.StatusOK)
	r.awaitDelivered(12, 10*time.Second, s.logs.String)
	awaitLog(t, s, `"msg":"webhook receiver answers again; its deliveries go at full speed"`)
	// Recorded within 250 ms of the answers.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		subs := listSubscribers(t, dir, "plantstore.db")
		if subs[0].State == "active" && subs[0].NextProbe == nil && subs[0].Delivered == 12 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook list once the receiver answers: %+v", subs[0])
		}
	}
}

// Creates never wait for deliveries: a receiver that hangs does not slow
// them down.
func TestWebhookHangingReceiverDoesNotSlowCreates(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	r := newReceiver(t)
	hold := make(chan struct{})
	r.hold = hold
	defer close(hold)
	subscribe(t, dir, "plantstore.db", r)
	s := serve(t, dir, testWebhookFlags...)
	client := apitest.Client(t)
	for i := int64(1); i <= 50; i++ {
		start := time.Now()
		if status, body := create(t, client, s.url, token, plantBody(i)); status != 200 {
			t.Fatalf("create %d: %d %s", i, status, body)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("create %d took %v while the receiver hangs", i, took)
		}
	}
	select {
	case <-r.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery was even attempted")
	}
}

// awaitLog waits until the server's log holds want.
func awaitLog(t *testing.T, s *server, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never showed %s:\n%s", want, s.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWebhookGoneDisablesSubscriber(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	r := newReceiver(t)
	r.answer(http.StatusGone)
	subscribe(t, dir, "plantstore.db", r)
	s := serve(t, dir, testWebhookFlags...)
	client := apitest.Client(t)
	create(t, client, s.url, token, plantBody(1))
	awaitLog(t, s, `subscriber disabled`)
	create(t, client, s.url, token, plantBody(2))
	time.Sleep(300 * time.Millisecond)
	if n := len(r.events()); n != 1 {
		t.Errorf("%d requests reached a subscriber that answered 410, want 1", n)
	}
	subs := listSubscribers(t, dir, "plantstore.db")
	if subs[0].DisabledAt == nil || subs[0].Failed != 1 || subs[0].Pending != 0 || !strings.Contains(subs[0].LastError, "410") ||
		subs[0].State != "disabled" || subs[0].LastErrorAt == nil {
		t.Errorf("after 410: %+v", subs[0])
	}
	if table := cli(t, dir, nil, "webhook", "list"); !strings.Contains(table.stdout, "disabled") {
		t.Errorf("webhook list does not show it disabled:\n%s", table.stdout)
	}
	// The delivery that got the 410 was sent once, and says so.
	if parked := parkedOf(t, dir, "plantstore.db", fmt.Sprint(subs[0].ID)); len(parked) != 1 || parked[0].Attempts != 1 || parked[0].LastStatus != http.StatusGone {
		t.Errorf("the delivery answered 410: %+v, want 1 attempt and status 410", parked)
	}
}

// Without --allow-private-webhooks, loopback is refused when connecting:
// the receiver hears nothing and the subscriber shows why.
func TestWebhookToPrivateAddressRefused(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	r := newReceiver(t)
	subscribe(t, dir, "plantstore.db", r)
	s := serve(t, dir, "--webhook-retry-schedule", "100ms", "--webhook-poll", "100ms")
	create(t, apitest.Client(t), s.url, token, plantBody(1))
	awaitLog(t, s, `"msg":"webhook attempt failed"`)
	if n := len(r.events()); n != 0 {
		t.Errorf("%d requests reached a loopback receiver without --allow-private-webhooks", n)
	}
	// The subscriber shows why, when, and the flag that would allow it;
	// failing, or, the attempts refused three times in a row (retried
	// every 100 ms), down as a receiver that cannot be reached.
	subs := listSubscribers(t, dir, "plantstore.db")
	if !strings.Contains(subs[0].LastError, "not allowed") || !strings.Contains(subs[0].LastError, "--allow-private-webhooks") ||
		subs[0].Pending != 1 || (subs[0].State != "failing" && subs[0].State != "down") || subs[0].LastErrorAt == nil || time.Since(*subs[0].LastErrorAt) > time.Minute {
		t.Errorf("subscriber after a refused attempt: %+v", subs[0])
	}
	table := cli(t, dir, nil, "webhook", "list")
	if !regexp.MustCompile(`(failing|down) .* \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+.*--allow-private-webhooks`).MatchString(table.stdout) {
		t.Errorf("webhook list does not show the state, the error's time and the error:\n%s", table.stdout)
	}
}

func TestWebhookFlagsChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--webhook-retry-schedule", "5s,-1s"},
		{"--webhook-retry-schedule", "soon"},
		{"--webhook-workers", "0"},
		{"--webhook-timeout", "0s"},
		{"--webhook-concurrency", "0"},
		{"--webhook-concurrency", "1025"},
		{"--webhook-park-after", "0s"},
		// The deprecated name and the new one, set apart.
		{"--webhook-max-age", "1h", "--webhook-park-after", "5m"},
	} {
		wantServeRefused(t, dir, append([]string{"--addr", "127.0.0.1:0"}, args...), strings.TrimPrefix(args[0], "--"))
	}
	wantNoStore(t, dir, "a refused configuration")
}

// A listening address that is not HOST:PORT is a usage error (exit 2),
// told before any store is made, not a failure to listen.
func TestServeAddressesChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--addr", "bogus"},
		{"--addr", "127.0.0.1"},
		{"--addr", "127.0.0.1:"},
		{"--addr", "127.0.0.1:99999"},
		{"--addr", "127.0.0.1:-1"},
		{"--addr", ""},
		{"--addr", "127.0.0.1:0", "--metrics-addr", "nope"},
		{"--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:99999"},
		{"--addr", "127.0.0.1:0", "--pprof-addr", "localhost"},
	} {
		wantServeRefused(t, dir, args, args[len(args)-2]+" ", "HOST:PORT")
	}
	// Two listeners given one port, on the same host or one of them on
	// every address: a mistake in the command line, not a port in use.
	for _, args := range [][]string{
		{"--addr", "127.0.0.1:18584", "--metrics-addr", "127.0.0.1:18584"},
		{"--addr", ":18584", "--pprof-addr", "127.0.0.1:18584"},
		{"--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:18585", "--pprof-addr", "[::]:18585"},
		{"--metrics-addr", "127.0.0.1:8080"}, // --addr's default
	} {
		wantServeRefused(t, dir, args, "one port for two listeners")
	}
	wantNoStore(t, dir, "a refused address")
}

// wantServeRefused runs serve with args and wants exit 2 (a usage
// mistake) and a message that says each of mentions.
func wantServeRefused(t *testing.T, dir string, args []string, mentions ...string) {
	t.Helper()
	res := cli(t, dir, nil, append([]string{"serve"}, args...)...)
	ok := res.exit == 2
	for _, m := range mentions {
		ok = ok && strings.Contains(res.stderr, m)
	}
	if !ok {
		t.Errorf("serve %q: exit %d, %q; want 2 and a message naming the flag", args, res.exit, res.stderr)
	}
}

// wantNoStore fails the test if dir holds a store: what was refused
// (what) must not have made one.
func wantNoStore(t *testing.T, dir, what string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "plantstore.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s created the store: %v", what, err)
	}
}

// A lease shorter than three attempts is raised, and the log says so.
// The deprecated --webhook-max-age still works, and the log says which
// flag to set instead.
func TestWebhookMaxAgeIsDeprecatedAloud(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := serve(t, dir, "--webhook-max-age", "7m")
	awaitLog(t, s, "--webhook-max-age is deprecated")
	if !strings.Contains(s.logs.String(), `"webhook_park_after":"7m0s"`) {
		t.Errorf("the park-after used is not --webhook-max-age's:\n%s", s.logs)
	}
}

// A flag of the other engine is said to be ignored, not dropped silently.
func TestOtherEnginesFlagSaidIgnored(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		s := serve(t, t.TempDir(), "--db-max-conns", "5")
		awaitLog(t, s, "--db-max-conns is for a PostgreSQL store: SQLite ignores it")
	})
	t.Run("postgres", func(t *testing.T) {
		s := serve(t, t.TempDir(), "--db", pgtest.NewDatabase(t), "--max-db-bytes", "100000")
		awaitLog(t, s, "--max-db-bytes is for a SQLite store: PostgreSQL ignores it")
	})
}

func TestShortWebhookLeaseIsRaisedAloud(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := serve(t, dir, "--webhook-lease", "1s", "--webhook-timeout", "2s")
	awaitLog(t, s, "--webhook-lease raised")
	if !strings.Contains(s.logs.String(), `"used":"6s"`) {
		t.Errorf("the lease used is not 3 x 2s:\n%s", s.logs)
	}
}
