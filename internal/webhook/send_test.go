package webhook

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var testKey = []byte("a test key of thirty-two bytes!!")

// received is what a subscriber saw of one request.
type received struct {
	method string
	header http.Header
	body   []byte
	err    error // from Verify
}

// newSubscriber starts a real HTTP server on loopback that verifies each
// request as a subscriber would, reports it on the returned channel, and
// answers with respond.
func newSubscriber(t *testing.T, respond func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			err = Verify(testKey, r.Header, body, time.Now(), time.Minute)
		}
		got <- received{method: r.Method, header: r.Header.Clone(), body: body, err: err}
		respond(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// loopbackClient is a NewClient allowed to reach the test servers.
func loopbackClient(t *testing.T, timeout time.Duration) *http.Client {
	t.Helper()
	c := NewClient(ClientOptions{AllowPrivate: true, Timeout: timeout})
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func status(code int) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
}

func TestSendDeliversSignedMessage(t *testing.T) {
	srv, got := newSubscriber(t, func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"ok":true}`)
	})
	body := []byte(`{"type":"plant.created","data":{"id":1,"name":"Fern"}}`)
	now := time.Now()

	r := Send(t.Context(), loopbackClient(t, 5*time.Second), Message{ID: "msg_1", URL: srv.URL + "/hooks", Key: testKey, Body: body}, now)
	if r.Outcome != Delivered || r.Status != 200 || r.Err != nil || r.RetryAfter != 0 {
		t.Fatalf("Send = %+v, want Delivered 200", r)
	}
	req := <-got
	if req.err != nil {
		t.Errorf("the subscriber could not verify the message: %v", req.err)
	}
	if req.method != http.MethodPost || string(req.body) != string(body) {
		t.Errorf("subscriber saw %s %q, want POST %q", req.method, req.body, body)
	}
	for name, want := range map[string]string{
		"webhook-id":   "msg_1",
		"Content-Type": "application/json",
		"User-Agent":   "plantstore-webhooks/1",
	} {
		if v := req.header.Get(name); v != want {
			t.Errorf("%s = %q, want %q", name, v, want)
		}
	}
}

func TestSendOutcomes(t *testing.T) {
	now := time.Now().Truncate(time.Second) // HTTP-dates have whole seconds
	for _, tc := range []struct {
		name           string
		respond        func(http.ResponseWriter, *http.Request)
		wantOutcome    Outcome
		wantStatus     int
		wantRetryAfter time.Duration
	}{
		{"200", status(200), Delivered, 200, 0},
		{"204", status(204), Delivered, 204, 0},
		{"410", status(410), Gone, 410, 0},
		{"500", status(500), Retry, 500, 0},
		{"400", status(400), Retry, 400, 0},
		{"429 Retry-After seconds", retryAfter(429, "7"), Retry, 429, 7 * time.Second},
		{"503 Retry-After date", retryAfter(503, now.Add(90*time.Second).UTC().Format(http.TimeFormat)), Retry, 503, 90 * time.Second},
		{"429 Retry-After past date", retryAfter(429, now.Add(-time.Hour).UTC().Format(http.TimeFormat)), Retry, 429, 0},
		{"429 Retry-After negative", retryAfter(429, "-5"), Retry, 429, 0},
		{"429 Retry-After garbage", retryAfter(429, "soon"), Retry, 429, 0},
		{"429 Retry-After absurd", retryAfter(429, "99999999999999999"), Retry, 429, time.Duration(1<<63 - 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, got := newSubscriber(t, tc.respond)
			r := Send(t.Context(), loopbackClient(t, 5*time.Second), Message{ID: "msg_2", URL: srv.URL, Key: testKey, Body: []byte(`{}`)}, now)
			if r.Outcome != tc.wantOutcome || r.Status != tc.wantStatus || r.RetryAfter != tc.wantRetryAfter {
				t.Errorf("Send = %+v, want %s, status %d, Retry-After %s", r, tc.wantOutcome, tc.wantStatus, tc.wantRetryAfter)
			}
			if (r.Err == nil) != (tc.wantOutcome == Delivered) {
				t.Errorf("Err = %v with outcome %s", r.Err, r.Outcome)
			}
			if req := <-got; req.err != nil {
				t.Errorf("subscriber: %v", req.err)
			}
		})
	}
}

func TestSendReadsLittleOfAnEndlessAnswer(t *testing.T) {
	srv, _ := newSubscriber(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		chunk := make([]byte, 32<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return // the client hung up, as it should
			}
		}
	})
	start := time.Now()
	r := Send(t.Context(), loopbackClient(t, 5*time.Second), Message{ID: "msg_9", URL: srv.URL, Key: testKey, Body: []byte(`{}`)}, time.Now())
	if r.Outcome != Delivered || r.Status != http.StatusAccepted {
		t.Errorf("Send = %+v, want Delivered 202", r)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("Send took %s: it read the endless body instead of stopping at 64 KiB", elapsed)
	}
}

func retryAfter(code int, v string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", v)
		w.WriteHeader(code)
	}
}

func TestSendDoesNotFollowRedirects(t *testing.T) {
	var targetHits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { targetHits.Add(1) }))
	t.Cleanup(target.Close)
	srv, _ := newSubscriber(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusFound)
	})

	r := Send(t.Context(), loopbackClient(t, 5*time.Second), Message{ID: "msg_3", URL: srv.URL, Key: testKey, Body: []byte(`{}`)}, time.Now())
	if r.Outcome != Retry || r.Status != http.StatusFound || r.Err == nil {
		t.Errorf("Send = %+v, want Retry 302 with an error", r)
	}
	if n := targetHits.Load(); n != 0 {
		t.Errorf("the redirect target saw %d requests, want 0", n)
	}
}

// slowSubscriber answers after a minute, or when the request is abandoned.
func slowSubscriber(t *testing.T) *httptest.Server {
	srv, _ := newSubscriber(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	})
	return srv
}

func TestSendTimesOut(t *testing.T) {
	srv := slowSubscriber(t)
	start := time.Now()
	r := Send(t.Context(), loopbackClient(t, 100*time.Millisecond), Message{ID: "msg_4", URL: srv.URL, Key: testKey, Body: []byte(`{}`)}, time.Now())
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Send took %s with a 100ms timeout", elapsed)
	}
	if r.Outcome != Retry || r.Status != 0 || r.Err == nil {
		t.Fatalf("Send = %+v, want Retry with no status and an error", r)
	}
	if !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Errorf("Err = %v, want one that is context.DeadlineExceeded", r.Err)
	}
}

func TestSendStopsWhenContextIsCancelled(t *testing.T) {
	srv := slowSubscriber(t)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	r := Send(ctx, loopbackClient(t, 10*time.Second), Message{ID: "msg_5", URL: srv.URL, Key: testKey, Body: []byte(`{}`)}, time.Now())
	if r.Outcome != Retry || r.Status != 0 || !errors.Is(r.Err, context.Canceled) {
		t.Errorf("Send = %+v, want Retry with context.Canceled", r)
	}
}

func TestSendToClosedPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	r := Send(t.Context(), loopbackClient(t, 2*time.Second), Message{ID: "msg_6", URL: "http://" + addr + "/hook?token=sekrit", Key: testKey, Body: []byte(`{}`)}, time.Now())
	if r.Outcome != Retry || r.Status != 0 || !errors.Is(r.Err, syscall.ECONNREFUSED) {
		t.Fatalf("Send = %+v, want Retry with connection refused", r)
	}
	if strings.Contains(r.Err.Error(), "sekrit") {
		t.Errorf("Err repeats the URL's query: %v", r.Err)
	}
}

func TestSendRefusesEmptyKey(t *testing.T) {
	srv, got := newSubscriber(t, status(200))
	r := Send(t.Context(), loopbackClient(t, 2*time.Second), Message{ID: "msg_7", URL: srv.URL, Body: []byte(`{}`)}, time.Now())
	if r.Outcome != Retry || r.Err == nil {
		t.Errorf("Send = %+v, want Retry with an error", r)
	}
	select {
	case <-got:
		t.Error("a message without a key was sent")
	default:
	}
}

func TestSendBadURL(t *testing.T) {
	r := Send(t.Context(), loopbackClient(t, 2*time.Second), Message{ID: "msg_8", URL: "ftp://example.com/x?token=sekrit", Key: testKey}, time.Now())
	if r.Outcome != Retry || r.Err == nil || strings.Contains(r.Err.Error(), "sekrit") {
		t.Errorf("Send = %+v, want Retry with an error that hides the URL", r)
	}
}

func TestOutcomeZeroValueIsRetry(t *testing.T) {
	if (Result{}).Outcome != Retry {
		t.Error("a zero Result must not read as delivered")
	}
	for o, want := range map[Outcome]string{Retry: "retry", Delivered: "delivered", Gone: "gone", 9: "Outcome(9)"} {
		if o.String() != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), o.String(), want)
		}
	}
}
