package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// script answers the requests it gets, in turn, from answers; past the
// end, the last answer repeats. An answer is a status and a Retry-After
// ("" for none), or drop (the connection closed unanswered) or reset
// (closed with a TCP reset).
type script struct {
	answers []string
	n       atomic.Int32
	times   chan time.Time
}

const (
	drop  = "drop"
	reset = "reset"
)

func serveScript(t *testing.T, answers ...string) (*httptest.Server, *script) {
	t.Helper()
	s := &script{answers: answers, times: make(chan time.Time, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(s.n.Add(1)) - 1
		s.times <- time.Now()
		answer := answers[min(i, len(answers)-1)]
		if answer == drop || answer == reset {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			if answer == reset {
				conn.(*net.TCPConn).SetLinger(0)
			}
			conn.Close()
			return
		}
		status, after, _ := strings.Cut(answer, " ")
		if after != "" {
			w.Header().Set("Retry-After", after)
		}
		w.Header().Set("Content-Type", "application/json")
		switch status {
		case "200":
			fmt.Fprint(w, `{"id":1,"name":"Fern"}`)
		default:
			w.WriteHeader(map[string]int{"429": 429, "503": 503, "404": 404}[status])
			fmt.Fprintf(w, `{"error":%s,"message":"answer %d"}`, status, i+1)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, s
}

func (s *script) requests() int { return int(s.n.Load()) }

// gaps are the times between the requests the script received.
func (s *script) gaps() []time.Duration {
	var times []time.Time
	for len(s.times) > 0 {
		times = append(times, <-s.times)
	}
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	return gaps
}

func newClient(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	c, err := New(url, "pst_test", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// quick retries with short delays, for the tests that do not need
// Retry-After's whole seconds.
var quick = WithRetryPolicy(RetryPolicy{Max: 3, BaseDelay: 20 * time.Millisecond, MaxDelay: 2 * time.Second})

func TestErrorCarriesRetryAfter(t *testing.T) {
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		answer   string
		min, max time.Duration
	}{
		{"429 7", 7 * time.Second, 7 * time.Second},
		{"503 " + date, 85 * time.Second, 90 * time.Second},
		{"429", 0, 0},
		{"503 soon", 0, 0},
		{"429 -3", 0, 0},
		{"404 5", 5 * time.Second, 5 * time.Second}, // whatever the status, the client reports it
	} {
		srv, s := serveScript(t, tc.answer)
		_, err := newClient(t, srv.URL).Get(t.Context(), 1) // no retries by default
		e, ok := errors.AsType[*Error](err)
		if !ok || e.RetryAfter < tc.min || e.RetryAfter > tc.max || RetryAfter(err) != e.RetryAfter {
			t.Errorf("answer %q: error %#v, want RetryAfter between %v and %v", tc.answer, err, tc.min, tc.max)
		}
		if s.requests() != 1 {
			t.Errorf("answer %q: %d requests without WithRetries, want 1", tc.answer, s.requests())
		}
	}
	if RetryAfter(errors.New("other")) != 0 {
		t.Error("RetryAfter of an error that is not an *Error")
	}
}

// 429 and 503 are retried after their Retry-After, then the answer is
// the one that succeeded.
func TestRetriesHonourRetryAfter(t *testing.T) {
	srv, s := serveScript(t, "429 1", "503 1", "200")
	start := time.Now()
	p, err := newClient(t, srv.URL, WithRetries(3)).Get(t.Context(), 1)
	if err != nil || p.Name != "Fern" {
		t.Fatalf("Get = %+v, %v; want the plant after two retries", p, err)
	}
	if s.requests() != 3 {
		t.Errorf("%d requests, want 3", s.requests())
	}
	for i, gap := range s.gaps() {
		// Never sooner than asked, and at most a quarter later (jitter).
		if gap < time.Second || gap > 1300*time.Millisecond {
			t.Errorf("retry %d came %v after the answer that asked for 1 s", i+1, gap)
		}
	}
	t.Logf("took %v", time.Since(start))
}

// Without Retry-After, the waits grow, jittered, within the policy's bounds.
func TestRetriesBackOff(t *testing.T) {
	srv, s := serveScript(t, "503", "503", "503", "503")
	c := newClient(t, srv.URL, WithRetryPolicy(RetryPolicy{Max: 3, BaseDelay: 40 * time.Millisecond, MaxDelay: 100 * time.Millisecond}))
	_, err := c.Get(t.Context(), 1)
	if StatusCode(err) != 503 || !strings.Contains(err.Error(), "answer 4") {
		t.Fatalf("Get = %v; want the fourth answer's 503 once the retries are spent", err)
	}
	gaps := s.gaps()
	// Waits of 20-40 ms, 40-80 ms, then 50-100 ms (capped); the server and
	// scheduler add a little.
	bounds := [][2]time.Duration{{20 * time.Millisecond, 40 * time.Millisecond}, {40 * time.Millisecond, 80 * time.Millisecond}, {50 * time.Millisecond, 100 * time.Millisecond}}
	if len(gaps) != 3 {
		t.Fatalf("%d retries, want 3", len(gaps))
	}
	for i, gap := range gaps {
		if gap < bounds[i][0] || gap > bounds[i][1]+50*time.Millisecond {
			t.Errorf("retry %d after %v, want %v to %v", i+1, gap, bounds[i][0], bounds[i][1])
		}
	}
}

func TestRetryWaitBounds(t *testing.T) {
	p := RetryPolicy{BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second}
	for range 1000 {
		for retry, want := range []time.Duration{100, 200, 400, 800, 1600, 2000, 2000} {
			want *= time.Millisecond
			if retry == 5 || retry == 6 {
				want = 2 * time.Second
			}
			if d, ok := p.wait(retry, 0); !ok || d < want/2 || d > want {
				t.Fatalf("wait(%d) = %v, want %v to %v", retry, d, want/2, want)
			}
		}
		if d, ok := p.wait(100, 0); !ok || d < time.Second || d > 2*time.Second {
			t.Fatalf("wait(100) = %v: the shift must not overflow past the cap", d)
		}
		if d, ok := p.wait(0, time.Second); !ok || d < time.Second || d > 1250*time.Millisecond {
			t.Fatalf("wait with Retry-After 1 s = %v, want 1 s to 1.25 s", d)
		}
		if d, ok := p.wait(0, 1900*time.Millisecond); !ok || d < 1900*time.Millisecond || d > 2*time.Second {
			t.Fatalf("wait with Retry-After 1.9 s = %v, want 1.9 s to the 2 s cap", d)
		}
	}
	if _, ok := p.wait(0, 3*time.Second); ok {
		t.Error("a Retry-After beyond MaxDelay is waited for")
	}
}

// A Retry-After beyond what the client waits comes back at once, for the
// caller to decide.
func TestRetryAfterBeyondMaxDelayReturnsAtOnce(t *testing.T) {
	srv, s := serveScript(t, "429 60", "200")
	start := time.Now()
	_, err := newClient(t, srv.URL, WithRetries(3)).Get(t.Context(), 1)
	if StatusCode(err) != 429 || RetryAfter(err) != time.Minute || s.requests() != 1 || time.Since(start) > time.Second {
		t.Errorf("Get = %v after %d requests and %v; want the 429 at once with its Retry-After of 1 minute", err, s.requests(), time.Since(start))
	}
}

// A Retry-After of more seconds than an int64 holds is a long wait, not
// none: it comes back at once too, not retried.
func TestRetryAfterPastInt64IsLong(t *testing.T) {
	srv, s := serveScript(t, "429 99999999999999999999", "200")
	_, err := newClient(t, srv.URL, WithRetries(3)).Get(t.Context(), 1)
	if StatusCode(err) != 429 || RetryAfter(err) < 24*time.Hour || s.requests() != 1 {
		t.Errorf("Get = %v (Retry-After %v) after %d requests; want the 429 at once with a long Retry-After", err, RetryAfter(err), s.requests())
	}
}

// Retries stay within the caller's context: a deadline too near for the
// wait returns the last answer at once; a cancellation during the wait
// ends it.
func TestRetriesRespectContext(t *testing.T) {
	srv, s := serveScript(t, "429 1", "200")
	c := newClient(t, srv.URL, WithRetries(3))
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Get(ctx, 1); StatusCode(err) != 429 || time.Since(start) > 200*time.Millisecond || s.requests() != 1 {
		t.Errorf("with 300 ms left: %v after %v and %d requests; want the 429 at once", err, time.Since(start), s.requests())
	}

	srv, _ = serveScript(t, "503 1", "200")
	c = newClient(t, srv.URL, WithRetries(3))
	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	_, err := c.Get(ctx, 1)
	if !errors.Is(err, context.Canceled) || StatusCode(err) != 503 || time.Since(start) > 500*time.Millisecond {
		t.Errorf("cancelled while waiting: %v after %v; want context.Canceled with the last answer's 503, at once", err, time.Since(start))
	}
}

// A connection that drops before the answer is retried: reads, updates,
// deletes and creates (a create sent again is a replay) alike.
func TestRetriesDroppedConnections(t *testing.T) {
	for _, how := range []string{drop, reset} {
		t.Run(how, func(t *testing.T) {
			calls := map[string]func(c *Client) error{
				"Get":    func(c *Client) error { _, err := c.Get(t.Context(), 1); return err },
				"Create": func(c *Client) error { _, err := c.Create(t.Context(), Plant{ID: 1, Name: "Fern"}); return err },
				"Update": func(c *Client) error { _, err := c.Update(t.Context(), Plant{ID: 1, Name: "Fern"}); return err },
				"Delete": func(c *Client) error { return c.Delete(t.Context(), 1) },
			}
			for name, call := range calls {
				srv, s := serveScript(t, how, how, "200")
				if err := call(newClient(t, srv.URL, quick)); err != nil || s.requests() != 3 {
					t.Errorf("%s: %v after %d requests; want success on the third", name, err, s.requests())
				}
				srv, s = serveScript(t, how, "200")
				if err := call(newClient(t, srv.URL)); err == nil || s.requests() != 1 {
					t.Errorf("%s without retries: %v after %d requests; want the dropped connection's error", name, err, s.requests())
				}
			}
		})
	}
}

// What is never retried: other answers, an address where nothing
// listens, and a POST that is not a create after anything but a 429.
func TestNotRetried(t *testing.T) {
	srv, s := serveScript(t, "404", "200")
	if _, err := newClient(t, srv.URL, quick).Get(t.Context(), 1); StatusCode(err) != 404 || s.requests() != 1 {
		t.Errorf("404: %v after %d requests", err, s.requests())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	if _, err := newClient(t, "http://"+addr, quick).Get(t.Context(), 1); err == nil || time.Since(start) > 500*time.Millisecond {
		t.Errorf("nothing listening: %v after %v; want the error at once", err, time.Since(start))
	}
	post := request{method: http.MethodPost}
	for _, err := range []error{&Error{StatusCode: 503}, fmt.Errorf("read: %w", errors.New("EOF"))} {
		if retryable(post, err) {
			t.Errorf("a POST that is not a create retried after %v", err)
		}
	}
	if !retryable(post, &Error{StatusCode: 429}) || !retryable(request{method: http.MethodPost, replay: true}, &Error{StatusCode: 503}) {
		t.Error("a 429, or a create's 503, not retried")
	}
}

func TestWithTLSConfig(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":1,"name":"Fern"}`)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())

	if _, err := newClient(t, srv.URL).Get(t.Context(), 1); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
	if p, err := newClient(t, srv.URL, WithTLSConfig(&tls.Config{RootCAs: roots})).Get(t.Context(), 1); err != nil || p.Name != "Fern" {
		t.Errorf("with the CA: %+v, %v", p, err)
	}
	// With a client of the caller's: its timeout is kept, and it is not changed.
	mine := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	c := newClient(t, srv.URL, WithHTTPClient(mine), WithTLSConfig(&tls.Config{RootCAs: roots}))
	if _, err := c.Get(t.Context(), 1); err != nil || c.http.Timeout != 5*time.Second {
		t.Errorf("with WithHTTPClient: %v, timeout %v", err, c.http.Timeout)
	}
	// (Cloning a transport lets Go set up HTTP/2 on it, which may give it
	// a TLSClientConfig of its own: look for ours.)
	if cfg := mine.Transport.(*http.Transport).TLSClientConfig; c.http == mine || cfg != nil && cfg.RootCAs != nil {
		t.Error("WithTLSConfig changed the caller's client or transport")
	}
	if cfg := http.DefaultTransport.(*http.Transport).TLSClientConfig; cfg != nil && cfg.RootCAs != nil {
		t.Error("WithTLSConfig changed the default transport")
	}
	other := &http.Client{Transport: roundTripper(func(*http.Request) (*http.Response, error) { return nil, errors.New("unused") })}
	if _, err := New(srv.URL, "pst_test", WithHTTPClient(other), WithTLSConfig(&tls.Config{})); err == nil {
		t.Error("WithTLSConfig on a transport that is not an *http.Transport: no error")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A policy whose doubling would overflow (BaseDelay<<retry wraps negative
// at the 28th retry of a minute) must neither crash the caller nor wait
// more than MaxDelay: against a server that always answers 503, the
// retries run out and the last 503 comes back.
func TestRetriesOverflowingBackoff(t *testing.T) {
	srv, s := serveScript(t, "503")
	c := newClient(t, srv.URL, WithRetryPolicy(RetryPolicy{Max: 40, BaseDelay: time.Minute, MaxDelay: time.Millisecond}))
	start := time.Now()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Get panicked after %d requests: %v", s.requests(), r)
			}
		}()
		_, err = c.Get(t.Context(), 1)
	}()
	if StatusCode(err) != 503 || s.requests() != 41 {
		t.Errorf("Get = %v after %d requests; want the 41st answer's 503", err, s.requests())
	}
	// 40 waits of at most 1 ms each; the rest is the requests themselves.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("40 retries capped at 1 ms took %v", took)
	}
}

// The backoff saturates at MaxDelay, at every retry count, for policies
// whose doubling overflows an int64 early or late, or never reaches the
// cap before it would.
func TestRetryWaitSaturates(t *testing.T) {
	policies := []RetryPolicy{
		{BaseDelay: time.Minute, MaxDelay: 10 * time.Millisecond}, // base above the cap
		{BaseDelay: 20 * time.Second, MaxDelay: 20 * time.Second}, // overflowed at the 30th retry
		{BaseDelay: 250 * time.Millisecond, MaxDelay: 10 * time.Second},
		{BaseDelay: time.Nanosecond, MaxDelay: math.MaxInt64}, // reaches the cap only at the 63rd
		{BaseDelay: math.MaxInt64 / 3, MaxDelay: math.MaxInt64},
	}
	retries := []int{0, 1, 2, 27, 28, 29, 30, 31, 32, 33, 62, 63, 64, 65, 100, 1 << 20, math.MaxInt32, math.MaxInt}
	for _, p := range policies {
		for _, retry := range retries {
			// BaseDelay*2^retry, or MaxDelay once that is as much or more.
			want := p.MaxDelay
			if exact := float64(p.BaseDelay) * math.Pow(2, float64(retry)); exact < float64(p.MaxDelay) {
				want = p.BaseDelay << retry
			}
			for range 100 {
				d, ok := p.wait(retry, 0)
				if !ok || d < want/2 || d > want {
					t.Fatalf("%+v: wait(%d) = %v, %v; want %v to %v", p, retry, d, ok, want/2, want)
				}
			}
		}
		// A Retry-After up to MaxDelay, plus its quarter, stays within
		// MaxDelay, even at the largest.
		for _, ra := range []time.Duration{p.MaxDelay, p.MaxDelay / 2, p.MaxDelay - 1} {
			if d, ok := p.wait(0, ra); !ok || d < ra || d > p.MaxDelay {
				t.Fatalf("%+v: wait with Retry-After %v = %v, %v; want %v to %v", p, ra, d, ok, ra, p.MaxDelay)
			}
		}
	}
}
