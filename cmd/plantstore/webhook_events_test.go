package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
)

// Webhooks for every change, as an operator and a receiver see them, on
// both engines: a subscriber added without --events gets new plants alone,
// with the NewPlant body, as before; one added with --events gets updates
// and deletes too, each plant's in order; a delivery its receiver keeps
// refusing is parked after --webhook-park-after while the plant's later
// events go on; webhook list shows it, webhook retry sends it again.
func TestWebhookEventsParkAndRetry(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			dir := t.TempDir()
			db := "plantstore.db"
			if engine == "postgres" {
				db = pgtest.NewDatabase(t)
			}
			testWebhookEventsParkAndRetry(t, dir, db)
		})
	}
}

func testWebhookEventsParkAndRetry(t *testing.T, dir, db string) {
	w := &parkAndRetry{dir: dir, db: db}
	token := mustToken(t, dir, "--name", "app", "--db", db)
	w.subscribe(t)
	w.change(t, token)
	w.checkDeliveries(t)
	w.checkList(t)
	w.retry(t)
}

// parkAndRetry is the state of testWebhookEventsParkAndRetry's phases: a
// subscriber without --events (plain), one with every event (all) whose
// receiver refuses plant 1's create, the server, and what got parked.
type parkAndRetry struct {
	dir, db        string
	plain, all     *receiver
	plainID, allID string
	s              *server
	parked         []subscriberParkedJSON
}

// subscribe adds the two subscribers, after refused forms of --events.
func (w *parkAndRetry) subscribe(t *testing.T) {
	w.plain = newReceiver(t)
	w.plainID = subscribe(t, w.dir, w.db, w.plain)
	w.all = newReceiver(t)
	w.all.refuse = func(e event) bool { return e.typ == "plant.created" && e.plantID == 1 }
	for _, bad := range []string{"plant.moved", "", "plant.created,nope"} {
		if res := cli(t, w.dir, nil, "webhook", "add", w.all.url(), "--events", bad, "--db", w.db); res.exit != 2 || res.stdout != "" {
			t.Errorf("webhook add --events %q: exit %d, stdout %q; want 2 and nothing", bad, res.exit, res.stdout)
		}
	}
	if res := cli(t, w.dir, nil, "webhook", "add", w.all.url(), "--events", "plant.created,plant.update", "--db", w.db); res.exit != 2 || !strings.Contains(res.stderr, "(did you mean plant.updated?)") {
		t.Errorf("webhook add --events with a near miss: exit %d, stderr %q; want 2 and a guess", res.exit, res.stderr)
	}
	res := cli(t, w.dir, nil, "webhook", "add", w.all.url(), "--events", "plant.deleted, plant.created,plant.updated", "--db", w.db)
	if res.exit != 0 || !strings.Contains(res.stderr, "(plant.created,plant.updated,plant.deleted)") {
		t.Fatalf("webhook add --events: exit %d, %s", res.exit, res.stderr)
	}
	w.all.setSecret(res.stdout)
	w.allID = regexp.MustCompile(`subscriber (\d+) `).FindStringSubmatch(res.stderr)[1]
}

// change starts the server and makes the changes, some of which record
// no event.
func (w *parkAndRetry) change(t *testing.T, token string) {
	w.s = serve(t, w.dir, append([]string{"--db", w.db, "--webhook-park-after", "300ms", "--webhook-concurrency", "4"}, testWebhookFlags...)...)
	client := apitest.Client(t)
	for _, step := range []struct{ method, path, body string }{
		{"POST", "/plants", `{"id":1,"name":"fern","tag":"green"}`},
		{"PUT", "/plants/1", `{"name":"fern","tag":"blue"}`},
		{"PUT", "/plants/1", `{"name":"fern","tag":"blue"}`}, // changes nothing: no event
		{"POST", "/plants", `{"id":2,"name":"moss"}`},
		{"DELETE", "/plants/2", ""},
		{"DELETE", "/plants/2", ""}, // 404: no event
	} {
		a := do(client, step.method, w.s.url+step.path, token, step.body)
		if a.err != nil || a.status >= 500 {
			t.Fatalf("%s %s: %v", step.method, step.path, a)
		}
	}
}

// checkDeliveries checks what each receiver got, and waits for the
// delivery its receiver refuses to be parked.
func (w *parkAndRetry) checkDeliveries(t *testing.T) {
	// The plain subscriber: the two creates, NewPlant bodies, nothing else.
	w.plain.awaitDelivered(2, 10*time.Second, w.s.logs.String)
	// The other: everything but plant 1's create, which is parked.
	w.all.awaitDelivered(3, 10*time.Second, w.s.logs.String)
	deadline := time.Now().Add(10 * time.Second)
	for len(w.parked) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		w.parked = parkedOf(t, w.dir, w.db, w.allID)
	}
	time.Sleep(300 * time.Millisecond) // time for any wrong delivery to arrive
	var plainGot []string
	for _, e := range w.plain.events() {
		plainGot = append(plainGot, e.typ+" "+e.body)
	}
	if want := []string{`plant.created {"id":1,"name":"fern","tag":"green"}`, `plant.created {"id":2,"name":"moss"}`}; !slices.Equal(slices.Sorted(slices.Values(plainGot)), want) {
		t.Errorf("the subscriber without --events got %q, want %q", plainGot, want)
	}
	byPlant := map[int64][]string{}
	var seqs = map[int64][]string{}
	for _, e := range w.all.events() {
		byPlant[e.plantID] = append(byPlant[e.plantID], fmt.Sprintf("%s %d", e.typ, e.status))
		seqs[e.plantID] = append(seqs[e.plantID], e.seq)
		if e.typ != "plant.created" {
			var body struct {
				ID   json.Number `json:"id"`
				Type string      `json:"type"`
			}
			if err := json.Unmarshal([]byte(e.body), &body); err != nil || body.ID.String() != e.seq || body.Type != e.typ {
				t.Errorf("%s body %s: want the event, with id %s and its type", e.typ, e.body, e.seq)
			}
		}
	}
	// Plant 1: its create refused until parked, its update delivered after.
	one := byPlant[1]
	if len(one) < 2 || one[len(one)-1] != "plant.updated 204" || slices.Contains(one[:len(one)-1], "plant.updated 204") {
		t.Errorf("plant 1's requests: %v, want its create refused, then its update delivered", one)
	}
	for _, st := range one[:len(one)-1] {
		if st != "plant.created 503" {
			t.Errorf("plant 1's requests: %v, want every create refused before the update", one)
		}
	}
	if got := fmt.Sprint(byPlant[2]); got != "[plant.created 204 plant.deleted 204]" {
		t.Errorf("plant 2's requests: %s, want its create then its delete", got)
	}
	if len(seqs[2]) == 2 && seqs[2][0] >= seqs[2][1] {
		t.Errorf("plant 2's event ids %v do not increase", seqs[2])
	}
}

// checkList checks that webhook list shows the parked delivery, in the
// table and in JSON.
func (w *parkAndRetry) checkList(t *testing.T) {
	// webhook list: the parked delivery, in the table and in JSON.
	// Plants go in parallel: plant 1's create is the first of its own
	// requests, not necessarily the first to arrive.
	firstOfOne := ""
	for _, e := range w.all.events() {
		if e.plantID == 1 {
			firstOfOne = e.id
			break
		}
	}
	if len(w.parked) != 1 || w.parked[0].EventType != "plant.created" || w.parked[0].PlantID != 1 || w.parked[0].LastStatus != 503 ||
		w.parked[0].WebhookID != firstOfOne || w.parked[0].EventID == 0 {
		t.Fatalf("parked deliveries of subscriber %s: %+v", w.allID, w.parked)
	}
	table := cli(t, w.dir, nil, "webhook", "list", "--db", w.db)
	if !regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+%s\s+%d\s+plant.created\s+1\s+\d+\s+\d{4}-\d\d-\d\dT\S+\s+503`, w.parked[0].ID, w.allID, w.parked[0].EventID)).MatchString(table.stdout) ||
		!regexp.MustCompile(fmt.Sprintf(`(?m)^%s\s.*plant.created,plant.updated,plant.deleted\s+\w+\s+0\s+3\s+1\s`, w.allID)).MatchString(table.stdout) ||
		!regexp.MustCompile(fmt.Sprintf(`(?m)^%s\s.*\splant.created\s+active\s+0\s+2\s+0\s`, w.plainID)).MatchString(table.stdout) {
		t.Errorf("webhook list does not show the events, counts and the parked delivery:\n%s", table.stdout)
	}
}

// retry checks webhook retry's refused forms, then sends the parked
// delivery again, with its webhook-id.
func (w *parkAndRetry) retry(t *testing.T) {
	// webhook retry: refused forms, then the delivery goes again, with its
	// webhook-id.
	for _, args := range [][]string{{}, {"x"}, {"1", "--subscriber", w.allID}} {
		if res := cli(t, w.dir, nil, append([]string{"webhook", "retry", "--db", w.db}, args...)...); res.exit != 2 {
			t.Errorf("webhook retry %q: exit %d, %s; want 2", args, res.exit, res.stderr)
		}
	}
	if res := cli(t, w.dir, nil, "webhook", "retry", "999999", "--db", w.db); res.exit != 1 || !strings.Contains(res.stderr, "parked") {
		t.Errorf("webhook retry of no parked delivery: exit %d, %s; want 1", res.exit, res.stderr)
	}
	w.all.mu.Lock()
	w.all.refuse = nil
	w.all.mu.Unlock()
	if res := cli(t, w.dir, nil, "webhook", "retry", fmt.Sprint(w.parked[0].ID), "--db", w.db); res.exit != 0 || !strings.Contains(res.stderr, "1 parked delivery will be sent again") {
		t.Fatalf("webhook retry: exit %d, %s", res.exit, res.stderr)
	}
	w.all.awaitDelivered(4, 10*time.Second, w.s.logs.String)
	last := w.all.events()[len(w.all.events())-1]
	if last.id != w.parked[0].WebhookID || last.typ != "plant.created" || last.plantID != 1 || last.status != 204 {
		t.Errorf("the retried delivery: %+v, want webhook-id %s", last, w.parked[0].WebhookID)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(parkedOf(t, w.dir, w.db, w.allID)) != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if p := parkedOf(t, w.dir, w.db, w.allID); len(p) != 0 {
		t.Errorf("still parked after the retry: %+v", p)
	}
	if res := cli(t, w.dir, nil, "webhook", "retry", "--subscriber", w.allID, "--db", w.db); res.exit != 0 || !strings.Contains(res.stderr, "0 parked") {
		t.Errorf("webhook retry --subscriber with none parked: exit %d, %s", res.exit, res.stderr)
	}
}

type subscriberParkedJSON struct {
	ID         int64  `json:"id"`
	WebhookID  string `json:"webhook_id"`
	EventID    int64  `json:"event_id"`
	EventType  string `json:"event_type"`
	PlantID    int64  `json:"plant_id"`
	Attempts   int    `json:"attempts"`
	LastStatus int    `json:"last_status"`
	LastError  string `json:"last_error"`
}

// parkedOf is what webhook list --json shows of a subscriber's parked
// deliveries.
func parkedOf(t *testing.T, dir, db, subscriberID string) []subscriberParkedJSON {
	t.Helper()
	res := cli(t, dir, nil, "webhook", "list", "--json", "--db", db)
	var subs []struct {
		ID     int64                  `json:"id"`
		Events []string               `json:"events"`
		Parked []subscriberParkedJSON `json:"parked"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &subs); err != nil {
		t.Fatalf("webhook list --json printed %q: %v", res.stdout, err)
	}
	for _, s := range subs {
		if fmt.Sprint(s.ID) == subscriberID {
			if s.Parked == nil {
				t.Fatalf("webhook list --json has no parked list for subscriber %s: %s", subscriberID, res.stdout)
			}
			return s.Parked
		}
	}
	t.Fatalf("subscriber %s not listed: %s", subscriberID, res.stdout)
	return nil
}

// A delivery of an update or a delete is the event as GET /events shows
// it, byte for byte (the contract's plantUpdated and plantDeleted), also
// for the characters JSON encoders disagree on: U+2028 and U+2029, which
// encoding/json escapes and the API does not, HTML's <&>, a backslash
// before a u, an empty tag.
func TestWebhookBodyIsTheFeedsEvent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	r := newReceiver(t)
	res := cli(t, dir, nil, "webhook", "add", r.url(), "--events", "plant.updated,plant.deleted")
	if res.exit != 0 {
		t.Fatalf("webhook add: exit %d, %s", res.exit, res.stderr)
	}
	r.setSecret(res.stdout)
	s := serve(t, dir, testWebhookFlags...)
	client := apitest.Client(t)
	for _, step := range []struct{ method, path, body string }{
		{"POST", "/plants", `{"id":1,"name":"fern","tag":"green"}`},
		{"PUT", "/plants/1", `{"name":"a\u2028b\u2029c <&> \\u2028","tag":""}`},
		{"DELETE", "/plants/1", ""},
	} {
		if a := do(client, step.method, s.url+step.path, token, step.body); a.err != nil || a.status/100 != 2 {
			t.Fatalf("%s %s: %v", step.method, step.path, a)
		}
	}
	r.awaitDelivered(2, 10*time.Second, s.logs.String)
	a := do(client, "GET", s.url+"/events", token, "")
	var feed []json.RawMessage
	if a.status != 200 || json.Unmarshal([]byte(a.body), &feed) != nil || len(feed) != 3 {
		t.Fatalf("GET /events: %v; want the three events", a)
	}
	for i, e := range r.events() {
		if want := string(feed[i+1]); e.body != want {
			t.Errorf("%s delivered\n%s\nwhere GET /events shows\n%s", e.typ, e.body, want)
		}
	}
}
