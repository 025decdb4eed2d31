package main

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/apitest"
)

// metricsAddr waits for serve's "metrics listening" line.
func metricsAddr(t *testing.T, s *server) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for line := range strings.Lines(s.logs.String()) {
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "metrics listening" {
				return l.Addr
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no metrics listening line:\n%s", s.logs)
	return ""
}

// sample reads one series' value from a scrape (0 when absent).
func sample(t *testing.T, text, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}

func scrapeMetrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// Metrics are served on their own listener, and move as requests are made.
func TestMetrics(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	r := newReceiver(t)
	subscribe(t, dir, "plantstore.db", r)
	s := serve(t, dir, append([]string{"--metrics-addr", "127.0.0.1:0"}, testWebhookFlags...)...)
	addr := metricsAddr(t, s)
	client := apitest.Client(t)

	before := scrapeMetrics(t, addr)
	const creates = 5
	for i := int64(1); i <= creates; i++ {
		if status, body := create(t, client, s.url, token, plantBody(i)); status != 200 {
			t.Fatalf("create: %d %s", status, body)
		}
	}
	create(t, client, s.url, "pst_0000000000000000000000000000000000000000", plantBody(9)) // 401
	http.Get(s.url + "/plants/1/leaves")                                                   // 404, no route
	r.awaitDelivered(creates, 10*time.Second, s.logs.String)
	time.Sleep(100 * time.Millisecond)
	after := scrapeMetrics(t, addr)

	moved := func(series string, want float64) {
		t.Helper()
		if d := sample(t, after, series) - sample(t, before, series); d != want {
			t.Errorf("%s moved by %v, want %v", series, d, want)
		}
	}
	moved(`plantstore_http_requests_total{method="POST",route="POST /plants",status="200"}`, creates)
	moved(`plantstore_http_requests_total{method="POST",route="POST /plants",status="401"}`, 1)
	moved(`plantstore_http_requests_total{method="GET",route="unmatched",status="404"}`, 1)
	moved(`plantstore_http_request_duration_seconds_count{method="POST",route="POST /plants"}`, creates+1)
	moved(`plantstore_store_operation_duration_seconds_count{operation="create_plant",outcome="ok"}`, creates)
	moved(`plantstore_store_group_commit_batch_size_sum`, creates)
	moved(`plantstore_webhook_delivered_total`, creates)
	moved(`plantstore_webhook_deliveries{state="delivered"}`, creates)
	if hits, misses := sample(t, after, "plantstore_auth_token_cache_hits_total"), sample(t, after, "plantstore_auth_token_cache_misses_total"); hits+misses < creates || hits < 1 {
		t.Errorf("token cache: %v hits, %v misses, for %d checks of one token", hits, misses, creates)
	}
	for _, series := range []string{"plantstore_http_requests_in_flight", "go_goroutines", "process_resident_memory_bytes", `plantstore_webhook_deliveries{state="pending"}`} {
		if !strings.Contains(after, series) {
			t.Errorf("the scrape lacks %s", series)
		}
	}
	if strings.Contains(after, "/plants/1/leaves") {
		t.Error("a raw path became a label")
	}
	// The metrics listener's refusals carry the Error body too.
	for method, want := range map[string]int{"GET /nope": 404, "POST /metrics": 405} {
		verb, path, _ := strings.Cut(method, " ")
		req, _ := http.NewRequest(verb, "http://"+addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error   int    `json:"error"`
			Message string `json:"message"`
		}
		if resp.StatusCode != want || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &e) != nil || e.Error != want || e.Message == "" {
			t.Errorf("%s on the metrics listener: %d %s %s", method, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
	// Never on the API's port.
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("GET /metrics on the API's port: %d, want 404", resp.StatusCode)
	}
}

func TestMetricsOffByDefault(t *testing.T) {
	t.Parallel()
	s := serve(t, t.TempDir())
	if strings.Contains(s.logs.String(), "metrics listening") {
		t.Error("metrics listen without --metrics-addr")
	}
}
