package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/sqlite"
	"github.com/plantstore/plantstore/internal/webhook"
)

// The document's webhooks.newPlant is the contract with subscribers, as
// paths are the contract with clients. These tests hold what the
// dispatcher sends to it, seen from a receiver's side of the wire.

// newPlantRoute is the document's webhooks.newPlant POST, as a route
// kin-openapi's request validator takes.
func newPlantRoute(t *testing.T) *routers.Route { return webhookRoute(t, "newPlant") }

// webhookRoute is the document's webhooks.<name> POST.
func webhookRoute(t *testing.T, name string) *routers.Route {
	t.Helper()
	c, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	item := c.Doc.Webhooks[name]
	if item == nil || item.Post == nil {
		t.Fatalf("the document has no webhooks.%s POST", name)
	}
	return &routers.Route{Spec: c.Doc, Path: name, PathItem: item, Method: http.MethodPost, Operation: item.Post}
}

// webhookNames are the document's webhooks by the event type they carry.
var webhookNames = map[string]string{
	plantstore.EventCreated: "newPlant",
	plantstore.EventUpdated: "plantUpdated",
	plantstore.EventDeleted: "plantDeleted",
}

// checkNewPlant reports how a received request, whose body was read into
// body, breaks webhooks.newPlant: method, header parameters, content type
// and body schema. No AuthenticationFunc is given, so an operation that
// demanded the API's bearer token, which deliveries do not carry, fails.
func checkNewPlant(route *routers.Route, req *http.Request, body []byte) error {
	if op := route.PathItem.GetOperation(req.Method); op == nil {
		return fmt.Errorf("method %s: webhooks.newPlant has no such operation", req.Method)
	}
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(body))
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: r,
		Route:   route,
		Options: &openapi3filter.Options{MultiError: true},
	})
}

// hookRequest is one request as a subscriber received it.
type hookRequest struct {
	req  *http.Request // its body already read
	body []byte
	at   time.Time
}

// hookRecorder answers every request 200, as the document asks, and keeps it.
type hookRecorder struct {
	mu  sync.Mutex
	got []hookRequest
}

func (h *hookRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest) // retried: the test sees the duplicate
		return
	}
	h.mu.Lock()
	h.got = append(h.got, hookRequest{req: req.Clone(context.Background()), body: body, at: time.Now()})
	h.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (h *hookRecorder) requests() []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookRequest(nil), h.got...)
}

func TestDeliveriesConformToNewPlantWebhook(t *testing.T) {
	route := newPlantRoute(t)

	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "plants.db"), sqlite.Options{SoleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	hooks := &hookRecorder{}
	srv := httptest.NewServer(hooks)
	t.Cleanup(srv.Close)
	disp, err := webhook.NewDispatcher(webhook.DispatcherConfig{
		Store:  store,
		Client: webhook.NewClient(webhook.ClientOptions{AllowPrivate: true, Timeout: 2 * time.Second}),
		Poll:   20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { disp.Run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped }) // runs first: the server outlives the dispatcher

	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := store.AddSubscriber(context.Background(), srv.URL+"/hooks/plants?source=contract", secret)
	if err != nil {
		t.Fatal(err)
	}

	tag := func(s string) *string { return &s }
	plants := []plantstore.Plant{
		{ID: 1, Name: "Monstera deliciosa", Tag: tag("tropical")},
		{ID: 2, Name: "Aloe vera"},
		{ID: 3, Name: "Fern", Tag: tag("")},
		{ID: math.MaxInt64, Name: "Ficus «lyrata» 🌿 無花果", Tag: tag("ß<&>\"\\/")},
		{ID: math.MinInt64, Name: strings.Repeat("é", plantstore.MaxNameLength), Tag: tag(strings.Repeat("🌱", plantstore.MaxTagLength))},
		{ID: 0, Name: "\u2028 line separator and \u00a0 no-break space"},
	}
	begin := time.Now()
	for _, p := range plants {
		if err := p.Validate(); err != nil {
			t.Fatalf("test plant %d is not one the API accepts: %v", p.ID, err)
		}
		if created, err := store.CreatePlant(context.Background(), p); err != nil || !created {
			t.Fatalf("create plant %d: created %v, %v", p.ID, created, err)
		}
	}

	deadline := time.Now().Add(3 * time.Second)
	for {
		subs, err := store.Subscribers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(subs) == 1 && subs[0].ID == sub.ID && subs[0].Delivered == int64(len(plants)) && subs[0].Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 s: %d requests received, subscriber %+v; want %d delivered", len(hooks.requests()), subs, len(plants))
		}
		time.Sleep(10 * time.Millisecond)
	}

	got := hooks.requests()
	if len(got) != len(plants) {
		t.Fatalf("%d requests for %d new plants, each answered 200", len(got), len(plants))
	}
	// Different plants go side by side, in any order: match them by id.
	byID := map[string]plantstore.Plant{}
	for _, p := range plants {
		byID[fmt.Sprint(p.ID)] = p
	}
	ids := map[string]bool{}
	for _, r := range got {
		var head struct {
			ID json.Number `json:"id"`
		}
		dec := json.NewDecoder(bytes.NewReader(r.body))
		dec.UseNumber()
		if err := dec.Decode(&head); err != nil {
			t.Fatalf("body %s: %v", r.body, err)
		}
		want, ok := byID[head.ID.String()]
		if !ok {
			t.Fatalf("body %s is for no plant created, or for one twice", r.body)
		}
		delete(byID, head.ID.String())
		t.Run(fmt.Sprintf("plant %d", want.ID), func(t *testing.T) {
			if err := checkNewPlant(route, r.req, r.body); err != nil {
				t.Errorf("does not conform to webhooks.newPlant: %v\nheaders %v\nbody %s", err, r.req.Header, r.body)
			}
			if r.req.URL.RequestURI() != "/hooks/plants?source=contract" {
				t.Errorf("sent to %s, not the subscriber's URL", r.req.URL.RequestURI())
			}
			if err := webhook.Verify(key, r.req.Header, r.body, r.at, 0); err != nil {
				t.Errorf("signature does not verify: %v", err)
			}
			if ts, err := strconv.ParseInt(r.req.Header.Get("webhook-timestamp"), 10, 64); err != nil || ts < begin.Unix() || ts > r.at.Unix() {
				t.Errorf("webhook-timestamp %q is not the attempt's time, from %d to %d", r.req.Header.Get("webhook-timestamp"), begin.Unix(), r.at.Unix())
			}
			id := r.req.Header.Get("webhook-id")
			if ids[id] {
				t.Errorf("webhook-id %s was sent for another plant too", id)
			}
			ids[id] = true
			if err := samePlant(r.body, want); err != nil {
				t.Errorf("body %s: %v", r.body, err)
			}
			if typ := r.req.Header.Get(webhook.HeaderEventType); typ != plantstore.EventCreated {
				t.Errorf("%s: %q, want plant.created", webhook.HeaderEventType, typ)
			}
		})
	}
}

// TestDeliveriesConformToEveryWebhook subscribes to every event type and
// checks each request against the document's webhook for its type: the
// created body the NewPlant, the others the event as GET /events shows
// it, the feed id in plantstore-event-id, and each plant's events
// arriving in the feed's order.
func TestDeliveriesConformToEveryWebhook(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "plants.db"), sqlite.Options{SoleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	hooks := &hookRecorder{}
	srv := httptest.NewServer(hooks)
	t.Cleanup(srv.Close)
	disp, err := webhook.NewDispatcher(webhook.DispatcherConfig{
		Store:  store,
		Client: webhook.NewClient(webhook.ClientOptions{AllowPrivate: true, Timeout: 2 * time.Second}),
		Poll:   20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { disp.Run(dctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
	secret, _ := webhook.NewSecret()
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.AddSubscriberFor(ctx, srv.URL+"/hooks", secret, plantstore.EventTypes); err != nil {
		t.Fatal(err)
	}
	tag := func(s string) *string { return &s }
	for id := int64(1); id <= 20; id++ {
		if _, err := store.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "Fern «n°" + fmt.Sprint(id) + "»", Tag: tag("green")}); err != nil {
			t.Fatal(err)
		}
	}
	for id := int64(1); id <= 20; id++ {
		if err := store.UpdatePlant(ctx, plantstore.Plant{ID: id, Name: "Fern 🌿 renamed"}, nil); err != nil {
			t.Fatal(err)
		}
		if id%2 == 0 {
			if err := store.DeletePlant(ctx, id, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	events, err := store.Events(ctx, plantstore.EventQuery{Limit: 1000})
	if err != nil || len(events) != 50 {
		t.Fatalf("Events: %d, %v; want 50", len(events), err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(hooks.requests()) < len(events) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := hooks.requests()
	if len(got) != len(events) {
		t.Fatalf("%d requests for %d events", len(got), len(events))
	}
	feed := map[string]plantstore.Event{}
	for _, e := range events {
		feed[fmt.Sprint(e.ID)] = e
	}
	routes := map[string]*routers.Route{}
	for typ, name := range webhookNames {
		routes[typ] = webhookRoute(t, name)
	}
	lastOfPlant := map[int64]int64{}
	for _, r := range got {
		seq := r.req.Header.Get(webhook.HeaderEventID)
		e, ok := feed[seq]
		if !ok {
			t.Fatalf("%s %q names no event of the feed, or one sent twice", webhook.HeaderEventID, seq)
		}
		delete(feed, seq)
		if typ := r.req.Header.Get(webhook.HeaderEventType); typ != e.Type {
			t.Errorf("event %d: %s %q, want %q", e.ID, webhook.HeaderEventType, typ, e.Type)
		}
		if err := checkNewPlant(routes[e.Type], r.req, r.body); err != nil {
			t.Errorf("event %d does not conform to webhooks.%s: %v\nbody %s", e.ID, webhookNames[e.Type], err, r.body)
		}
		if err := webhook.Verify(key, r.req.Header, r.body, r.at, 0); err != nil {
			t.Errorf("event %d: signature does not verify: %v", e.ID, err)
		}
		if e.ID < lastOfPlant[e.Plant.ID] {
			t.Errorf("plant %d: event %d arrived after event %d", e.Plant.ID, e.ID, lastOfPlant[e.Plant.ID])
		}
		lastOfPlant[e.Plant.ID] = e.ID
		if e.Type == plantstore.EventCreated {
			if err := samePlant(r.body, e.Plant); err != nil {
				t.Errorf("event %d: %v", e.ID, err)
			}
			continue
		}
		var body struct {
			ID    int64           `json:"id"`
			Type  string          `json:"type"`
			Time  time.Time       `json:"time"`
			Plant json.RawMessage `json:"plant"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatalf("event %d: body %s: %v", e.ID, r.body, err)
		}
		if body.ID != e.ID || body.Type != e.Type || !body.Time.Equal(e.At) {
			t.Errorf("event %d: body %s, want id %d, type %s, time %v", e.ID, r.body, e.ID, e.Type, e.At)
		}
		if err := samePlant(body.Plant, e.Plant); err != nil {
			t.Errorf("event %d: plant %v", e.ID, err)
		}
	}
}

// samePlant reports how body, decoded with every digit of the id kept,
// differs from the NewPlant of p: exactly id, name and tag, with tag absent
// when p has none.
func samePlant(body []byte, p plantstore.Plant) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var got map[string]any
	if err := dec.Decode(&got); err != nil {
		return err
	}
	want := map[string]any{"id": json.Number(fmt.Sprint(p.ID)), "name": p.Name}
	if p.Tag != nil {
		want["tag"] = *p.Tag
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("decodes to %#v, want %#v", got, want)
	}
	return nil
}

// The event webhooks' check must catch drift too.
func TestEventWebhookCheckCatchesDrift(t *testing.T) {
	route := webhookRoute(t, "plantUpdated")
	key := make([]byte, 32)
	good := `{"id":42,"type":"plant.updated","time":"2026-11-23T20:45:00.123Z","plant":{"id":1,"name":"Fern"}}`
	signed := func(body string, edit func(http.Header)) error {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/hooks", strings.NewReader(body))
		req.Header = webhook.Headers(key, "msg_h817tnz2xgpk0nq7rzqm27f8pg", time.Now(), []byte(body))
		req.Header.Set(webhook.HeaderEventType, "plant.updated")
		req.Header.Set(webhook.HeaderEventID, "42")
		if edit != nil {
			edit(req.Header)
		}
		return checkNewPlant(route, req, []byte(body))
	}
	if err := signed(good, nil); err != nil {
		t.Fatalf("a good request does not conform: %v", err)
	}
	for name, tc := range map[string]struct {
		body string
		edit func(http.Header)
	}{
		"another type":         {strings.Replace(good, "plant.updated", "plant.deleted", 1), nil},
		"no time":              {`{"id":42,"type":"plant.updated","plant":{"id":1,"name":"Fern"}}`, nil},
		"a NewPlant":           {`{"id":1,"name":"Fern"}`, nil},
		"no event id header":   {good, func(h http.Header) { h.Del(webhook.HeaderEventID) }},
		"another type header":  {good, func(h http.Header) { h.Set(webhook.HeaderEventType, "plant.created") }},
		"no event type header": {good, func(h http.Header) { h.Del(webhook.HeaderEventType) }},
	} {
		if err := signed(tc.body, tc.edit); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The check must catch drift, or TestDeliveriesConformToNewPlantWebhook
// proves nothing: each request here breaks webhooks.newPlant in one way.
func TestNewPlantWebhookCheckCatchesDrift(t *testing.T) {
	route := newPlantRoute(t)
	key := make([]byte, 32)
	now := time.Now()
	good := `{"id":1,"name":"Monstera deliciosa","tag":"tropical"}`
	signed := func(method, body string, edit func(http.Header)) *http.Request {
		req := httptest.NewRequest(method, "http://127.0.0.1/hooks", strings.NewReader(body))
		req.Header = webhook.Headers(key, "msg_h817tnz2xgpk0nq7rzqm27f8pg", now, []byte(body))
		req.Header.Set(webhook.HeaderEventType, "plant.created")
		if edit != nil {
			edit(req.Header)
		}
		return req
	}
	check := func(req *http.Request) error {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			t.Fatal(err)
		}
		return checkNewPlant(route, req, body)
	}
	if err := check(signed(http.MethodPost, good, nil)); err != nil {
		t.Fatalf("a good request does not conform: %v", err)
	}
	cases := []struct {
		name, method, body string
		edit               func(http.Header)
	}{
		{"GET", http.MethodGet, good, nil},
		{"no webhook-id", http.MethodPost, good, func(h http.Header) { h.Del("webhook-id") }},
		{"no webhook-timestamp", http.MethodPost, good, func(h http.Header) { h.Del("webhook-timestamp") }},
		{"fractional timestamp", http.MethodPost, good, func(h http.Header) { h.Set("webhook-timestamp", "1767225600.5") }},
		{"no webhook-signature", http.MethodPost, good, func(h http.Header) { h.Del("webhook-signature") }},
		{"signature without v1", http.MethodPost, good, func(h http.Header) { h.Set("webhook-signature", "+a91e+ucRB1mls/FHg98heyZbgMp8Y21BeyAHLDqFe0=") }},
		{"text/plain", http.MethodPost, good, func(h http.Header) { h.Set("Content-Type", "text/plain") }},
		{"no id", http.MethodPost, `{"name":"Monstera deliciosa"}`, nil},
		{"id as a string", http.MethodPost, `{"id":"1","name":"Monstera deliciosa"}`, nil},
		{"id beyond int64", http.MethodPost, `{"id":1e19,"name":"Monstera deliciosa"}`, nil},
		{"no name", http.MethodPost, `{"id":1}`, nil},
		{"empty name", http.MethodPost, `{"id":1,"name":""}`, nil},
		{"name of 201 code points", http.MethodPost, `{"id":1,"name":"` + strings.Repeat("é", 201) + `"}`, nil},
		{"tag null", http.MethodPost, `{"id":1,"name":"Monstera deliciosa","tag":null}`, nil},
		{"control character", http.MethodPost, `{"id":1,"name":"Monstera\u0007"}`, nil},
		{"not an object", http.MethodPost, `[1]`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := check(signed(tc.method, tc.body, tc.edit)); err == nil {
				t.Errorf("accepted %s %s", tc.method, tc.body)
			}
		})
	}
}
