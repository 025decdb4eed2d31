package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

// awaitSample scrapes until series reads want, and fails after a few
// seconds: the server counts a connection a moment after the client's
// dial returns, and uncounts it a moment after the client closes it.
func awaitSample(t *testing.T, addr, series string, want float64) {
	t.Helper()
	var got float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = sample(t, scrapeMetrics(t, addr), series); got == want {
			return
		}
	}
	t.Fatalf("%s is %v, want %v", series, got, want)
}

// answeredOn sends a GET on conn and reads its answer.
func answeredOn(t *testing.T, conn net.Conn, path string, within time.Duration) bool {
	t.Helper()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	return answered(t, conn, path, within)
}

// answered reads the answer to the GET of path sent on conn, and reports
// false when none came within the time given; a 5xx fails the test.
func answered(t *testing.T, conn net.Conn, path string, within time.Duration) bool {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(within))
	defer conn.SetReadDeadline(time.Time{})
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		if isTimeout(err) {
			return false
		}
		t.Fatalf("GET %s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	return true
}

// The connections open on the API's port, whichever server holds them
// and whether or not they have sent anything, are a gauge beside the cap.
// Scrapes go to the metrics listener, a port of its own that
// --max-connections does not cover, so they add nothing to the count.
func TestMetricsConnectionsOpen(t *testing.T) {
	t.Parallel()
	s := serve(t, t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	addr := metricsAddr(t, s)
	const open, max = "plantstore_http_connections_open", "plantstore_http_connections_max"
	text := scrapeMetrics(t, addr)
	if got := sample(t, text, max); got != 4096 {
		t.Errorf("%s %v, want the default --max-connections, 4096", max, got)
	}
	if !strings.Contains(text, "# TYPE "+open+" gauge") {
		t.Fatalf("the scrape has no gauge %s", open)
	}
	awaitSample(t, addr, open, 0)

	var conns []net.Conn
	for _, path := range []string{"", "", "/plants/1", "/plants/2", "/healthz", "/healthz"} {
		conn := limDial(t, s.url)
		conns = append(conns, conn)
		// Kept alive after the answer: the lean server's 401, net/http's
		// 200; the first two send nothing.
		if path != "" && !answeredOn(t, conn, path, 5*time.Second) {
			t.Fatalf("GET %s was not answered", path)
		}
	}
	awaitSample(t, addr, open, float64(len(conns)))
	// Steady: not one more, however often it is scraped.
	for range 3 {
		if got := sample(t, scrapeMetrics(t, addr), open); got != float64(len(conns)) {
			t.Fatalf("%s %v with %d connections open", open, got, len(conns))
		}
	}
	for _, c := range conns {
		c.Close()
	}
	awaitSample(t, addr, open, 0)
}

// The liveness probe's /healthz on the metrics listener is no API
// traffic: not in the API's request counter, nor in the access log.
func TestMetricsListenerHealthzIsNoAPITraffic(t *testing.T) {
	t.Parallel()
	s := serve(t, t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	addr := metricsAddr(t, s)
	for range 3 {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != `{"status":"ok"}` || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("/healthz on --metrics-addr: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	if got := sample(t, scrapeMetrics(t, addr), `plantstore_http_requests_total{method="GET",route="GET /healthz",status="200"}`); got != 0 {
		t.Errorf("the metrics listener's /healthz counted as %v API requests, want none", got)
	}
	time.Sleep(400 * time.Millisecond) // the log is written every 200 ms
	if strings.Contains(s.logs.String(), `"path":"/healthz"`) {
		t.Errorf("the metrics listener's /healthz in the access log:\n%s", s.logs)
	}
}

// A request refused before any handler runs (malformed: 400; its header
// too large: 431; a TLS client on the plain port: 400) is counted with the
// others, route unmatched, method other, and logged: a flood of them
// shows in the metrics, not only in the log.
func TestMetricsCountRequestsRefusedBeforeRouting(t *testing.T) {
	t.Parallel()
	s := serve(t, t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	addr := metricsAddr(t, s)
	for _, raw := range []string{
		"GARBAGE\r\n\r\n",
		"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 40<<10) + "\r\n\r\n",
	} {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, raw)
		// Its answer has an id of the service's (the request's own was
		// not read), to find the refusal by in the log.
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || !strings.HasPrefix(resp.Header.Get("X-Request-Id"), "ps-") {
			t.Errorf("%.20q: %v, %v; want an answer with an X-Request-Id of the service's", raw, resp, err)
		}
		c.Close()
	}
	// The TLS client's answer is the others' kind: the Error body, with
	// a request id to find it by in the log.
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00}) // a handshake record
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	c.Close()
	const tlsRefused = "this port speaks plain HTTP, not TLS: use an http:// URL"
	id := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != 400 || string(body) != `{"error":400,"message":"`+tlsRefused+`"}` || id == "" {
		t.Errorf("a TLS client on the plain port: %d %q %s", resp.StatusCode, resp.Header, body)
	}
	if !s.logged(`"msg":"request rejected before routing","status":400,"message":"`+tlsRefused+`","request_id":"`+id+`"`, 5*time.Second) {
		t.Errorf("the TLS client's refusal is not logged with its request id %q:\n%s", id, s.logs)
	}
	text := scrapeMetrics(t, addr)
	for series, want := range map[string]float64{
		`plantstore_http_requests_total{method="other",route="unmatched",status="400"}`: 2,
		`plantstore_http_requests_total{method="other",route="unmatched",status="431"}`: 1,
	} {
		if got := sample(t, text, series); got != want {
			t.Errorf("%s %v, want %v", series, got, want)
		}
	}
}

// Each time the connections open reach --max-connections, the server
// stops accepting (a third client waits in the kernel's queue) and counts
// a wait: as soon as the cap is reached, and again when a closed
// connection's place is taken by the client that was waiting.
func TestMetricsConnectionLimitWaits(t *testing.T) {
	t.Parallel()
	s := serve(t, t.TempDir(), "--max-connections", "2", "--metrics-addr", "127.0.0.1:0")
	addr := metricsAddr(t, s)
	const waits, open = "plantstore_http_connection_limit_waits_total", "plantstore_http_connections_open"
	text := scrapeMetrics(t, addr)
	if got := sample(t, text, "plantstore_http_connections_max"); got != 2 {
		t.Errorf("plantstore_http_connections_max %v, want 2", got)
	}
	if !strings.Contains(text, "# TYPE "+waits+" counter\n"+waits+" 0\n") {
		t.Fatalf("the scrape has no counter %s at 0:\n%s", waits, text)
	}
	first, second := limDial(t, s.url), limDial(t, s.url)
	if !answeredOn(t, first, "/plants/1", 5*time.Second) || !answeredOn(t, second, "/healthz", 5*time.Second) {
		t.Fatal("the first two connections were not served")
	}
	awaitSample(t, addr, waits, 1)
	awaitSample(t, addr, open, 2)
	third := limDial(t, s.url)
	if answeredOn(t, third, "/healthz", 300*time.Millisecond) {
		t.Fatal("a third connection was served with --max-connections 2 and two open")
	}
	if got := sample(t, scrapeMetrics(t, addr), waits); got != 1 {
		t.Errorf("%s %v while the cap holds, want 1", waits, got)
	}
	// The liveness probe's way around the cap: /healthz on the metrics
	// listener answers while the API's port holds clients back.
	if resp, err := http.Get("http://" + addr + "/healthz"); err != nil {
		t.Errorf("/healthz on --metrics-addr while the cap holds: %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != `{"status":"ok"}` || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("/healthz on --metrics-addr: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	first.Close()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(third), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the third connection, once the first closed: %v %v", resp, err)
	}
	awaitSample(t, addr, waits, 2)
	awaitSample(t, addr, open, 2)
}

// With --max-connections-per-address 2, a third connection from one
// address is closed at once, unanswered, counted and logged, while
// another address is served; a closed connection gives its address's
// place back. A trusted proxy's address has no such cap.
func TestMaxConnectionsPerAddress(t *testing.T) {
	t.Parallel()
	s := serve(t, t.TempDir(), "--max-connections-per-address", "2", "--metrics-addr", "127.0.0.1:0")
	addr := metricsAddr(t, s)
	const refused = "plantstore_http_connections_refused_total"
	if text := scrapeMetrics(t, addr); !strings.Contains(text, "# TYPE "+refused+" counter\n"+refused+" 0\n") {
		t.Fatalf("the scrape has no counter %s at 0:\n%s", refused, text)
	}
	first, second := dialFrom(t, s.url, "127.0.0.1"), dialFrom(t, s.url, "127.0.0.1")
	if !answeredOn(t, first, "/healthz", 5*time.Second) || !answeredOn(t, second, "/plants/1", 5*time.Second) {
		t.Fatal("the first two connections were not served")
	}
	third := dialFrom(t, s.url, "127.0.0.1")
	fmt.Fprint(third, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := third.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("a third connection from one address: read %d bytes (%v), want it closed unanswered", n, err)
	}
	awaitSample(t, addr, refused, 1)
	limAwaitLog(t, s, "connection refused: its address has the most connections")
	if !answeredOn(t, dialFrom(t, s.url, "127.0.0.2"), "/healthz", 5*time.Second) {
		t.Fatal("a connection from another address was not served")
	}
	first.Close()
	awaitSample(t, addr, "plantstore_http_connections_open", 2)
	if !answeredOn(t, dialFrom(t, s.url, "127.0.0.1"), "/healthz", 5*time.Second) {
		t.Fatal("a connection from the address was not served after one of its two closed")
	}

	proxied := serve(t, t.TempDir(), "--max-connections-per-address", "1", "--trusted-proxies", "127.0.0.1")
	for i := range 3 {
		if !answeredOn(t, dialFrom(t, proxied.url, "127.0.0.1"), "/healthz", 5*time.Second) {
			t.Fatalf("connection %d from a trusted proxy was not served with a cap of 1 an address", i+1)
		}
	}
}

// dialFrom connects to the server at url from the loopback address from.
func dialFrom(t *testing.T, url, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}
