package metrics

import (
	"context"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/sqlite"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestSeries(t *testing.T) {
	m := New()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "m.db"), sqlite.Options{ObserveBatch: m.ObserveBatch})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := m.InstrumentStore(db)
	m.TokenCache(func() (int64, int64) { return 7, 3 })
	m.Webhooks(func() WebhookStats { return WebhookStats{Attempts: 5, Delivered: 4, Retried: 1, Paused: 2} }, store)

	// Twice each, the second through the resolved children (requestChildren).
	for range 2 {
		m.RequestStarted()
		m.RequestDone("POST /plants", "POST", 200, 3*time.Millisecond)
	}
	m.RequestStarted()
	m.RequestDone("POST /plants", "POST", 409, time.Millisecond)
	m.RequestStarted()
	m.RequestDone("", "BREW", 404, time.Millisecond)
	m.RequestStarted() // still in flight
	for id := range int64(2) {
		if _, err := store.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: "fern"}); err != nil {
			t.Fatal(err)
		}
	}
	store.GetPlant(context.Background(), 404)

	text := scrape(t, m)
	for _, want := range []string{
		`plantstore_http_requests_total{method="POST",route="POST /plants",status="200"} 2`,
		`plantstore_http_requests_total{method="POST",route="POST /plants",status="409"} 1`,
		`plantstore_http_requests_total{method="other",route="unmatched",status="404"} 1`,
		`plantstore_http_request_duration_seconds_count{method="POST",route="POST /plants"} 3`,
		`plantstore_http_requests_in_flight 1`,
		`plantstore_store_operation_duration_seconds_count{operation="create_plant",outcome="ok"} 2`,
		`plantstore_store_operation_duration_seconds_count{operation="get_plant",outcome="not_found"} 1`,
		`plantstore_store_group_commit_batch_size_count 2`,
		`plantstore_auth_token_cache_hits_total 7`,
		`plantstore_auth_token_cache_misses_total 3`,
		`plantstore_webhook_attempts_total 5`,
		`plantstore_webhook_retried_total 1`,
		`plantstore_webhook_receiver_down_total 2`,
		`plantstore_webhook_deliveries{state="pending"} 0`,
		`go_goroutines `,
		`process_resident_memory_bytes `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}

// The API listener's connections: two gauges and two counters, read at each
// scrape.
func TestConnections(t *testing.T) {
	m := New()
	stats := ConnStats{Open: 3, Waits: 2, Refused: 7}
	m.Connections(4096, func() ConnStats { return stats })
	text := scrape(t, m)
	stats = ConnStats{Open: 1, Waits: 5, Refused: 9}
	again := scrape(t, m)
	for _, tc := range []struct{ text, want string }{
		{text, "# TYPE plantstore_http_connections_open gauge\nplantstore_http_connections_open 3\n"},
		{text, "# TYPE plantstore_http_connections_max gauge\nplantstore_http_connections_max 4096\n"},
		{text, "# TYPE plantstore_http_connection_limit_waits_total counter\nplantstore_http_connection_limit_waits_total 2\n"},
		{again, "plantstore_http_connections_open 1\n"},
		{again, "plantstore_http_connection_limit_waits_total 5\n"},
		{text, "# TYPE plantstore_http_connections_refused_total counter\nplantstore_http_connections_refused_total 7\n"},
		{again, "plantstore_http_connections_refused_total 9\n"},
	} {
		if !strings.Contains(tc.text, tc.want) {
			t.Errorf("the scrape lacks %q:\n%s", tc.want, tc.text)
		}
	}
}

// unreachableOutbox is a store whose database is down.
type unreachableOutbox struct{ plantstore.WebhookStore }

func (unreachableOutbox) CountDeliveries(context.Context) (plantstore.DeliveryCounts, error) {
	return plantstore.DeliveryCounts{}, plantstore.Errorf(plantstore.EUNAVAILABLE, "the store cannot be reached")
}

// With the database down, a scrape still answers 200 with every series
// but the outbox's counts, which it cannot read: the request counters
// that show the outage among them.
func TestScrapeDuringAnOutage(t *testing.T) {
	m := New()
	m.Webhooks(func() WebhookStats { return WebhookStats{Attempts: 5} }, unreachableOutbox{})
	m.RequestStarted()
	m.RequestDone("GET /plants/{id}", "GET", 503, time.Millisecond)
	text := scrape(t, m)
	for _, want := range []string{
		`plantstore_http_requests_total{method="GET",route="GET /plants/{id}",status="503"} 1`,
		`plantstore_webhook_attempts_total 5`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
	if strings.Contains(text, "plantstore_webhook_deliveries{") {
		t.Error("the scrape has outbox counts it could not read")
	}
}
