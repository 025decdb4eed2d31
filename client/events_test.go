package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Events ends after an error that asking again cannot mend, and
// reconnects after one that may pass. A redirect to another origin is of
// the first kind: it comes back at every reconnection, and following it
// would send the token there.
func TestEventsEndOnPermanentRefusals(t *testing.T) {
	t.Parallel()
	var leaked atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
	}))
	t.Cleanup(elsewhere.Close) // after the parallel subtests
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String() // nothing listens there
	closed.Close()

	for _, tc := range []struct {
		name      string
		answer    http.HandlerFunc // nil: a connection refused
		permanent bool
		says      []string // in the error yielded
	}{
		{"redirect to another origin", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+"/events", http.StatusMovedPermanently)
		}, true, []string{"not following a redirect from http://127.0.0.1:", "/events to " + elsewhere.URL + "/events", "not sent to another origin"}},
		{"redirect loop", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, r.URL.String(), http.StatusFound)
		}, true, []string{"10 redirects"}},
		{"3xx not followed", status(http.StatusMultipleChoices), true, []string{"300"}},
		{"400", status(http.StatusBadRequest), true, []string{"400: answer"}},
		{"401 bad token", status(http.StatusUnauthorized), true, []string{"401: answer"}},
		{"403", status(http.StatusForbidden), true, []string{"403: answer"}},
		{"404 wrong path", status(http.StatusNotFound), true, []string{"404: answer"}},
		{"405", status(http.StatusMethodNotAllowed), true, []string{"405: answer"}},
		{"410", status(http.StatusGone), true, []string{"410: answer"}},
		{"not an event stream", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html>a web site</html>")
		}, true, []string{`"text/html", not an event stream`}},
		{"500", status(http.StatusInternalServerError), false, nil},
		{"502", status(http.StatusBadGateway), false, nil},
		{"503", status(http.StatusServiceUnavailable), false, nil},
		{"408", status(http.StatusRequestTimeout), false, nil},
		{"429", status(http.StatusTooManyRequests), false, nil},
		{"connection dropped", func(w http.ResponseWriter, r *http.Request) {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}, false, nil},
		{"connection refused", nil, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var requests atomic.Int32
			base := refused
			if tc.answer != nil {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					requests.Add(1)
					tc.answer(w, r)
				}))
				defer srv.Close()
				base = srv.URL
			}
			c := newClient(t, base)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var errs []error
			for _, err := range c.Events(ctx, FromNow) {
				if err == nil {
					t.Fatal("an event, from no stream")
				}
				// A second error is a reconnection: enough either way.
				if errs = append(errs, err); len(errs) == 2 {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("Events yielded %d errors in 20 s: %v", len(errs), errs)
			}
			if tc.permanent {
				if len(errs) != 1 {
					t.Fatalf("Events reconnected after %v; want it to end after it", errs[0])
				}
				if !Permanent(errs[0]) {
					t.Errorf("Permanent(%v) = false", errs[0])
				}
				for _, s := range tc.says {
					if !strings.Contains(errs[0].Error(), s) {
						t.Errorf("error %q does not say %q", errs[0], s)
					}
				}
				return
			}
			if len(errs) != 2 || Permanent(errs[0]) {
				t.Fatalf("Events ended after %v (Permanent %v); want it to reconnect", errs[0], Permanent(errs[0]))
			}
			if tc.answer != nil && requests.Load() != 2 {
				t.Errorf("%d requests; want 2, one a reconnection", requests.Load())
			}
		})
	}
	t.Cleanup(func() {
		if n := leaked.Load(); n != 0 {
			t.Errorf("the other origin got %d requests", n)
		}
	})
}

// status answers code with an Error body, as the service does.
func status(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":%d,"message":"answer %d"}`, code, code)
	}
}

// Refused for now with a Retry-After (a 429 or 503: as many streams open
// as the service allows), Events waits at least that long before it asks
// again, seconds or an HTTP-date; without one, its own first pause.
func TestEventsWaitRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		code       int
		retryAfter func() string // "" for none
		atLeast    time.Duration // between the two requests
	}{
		{"429 seconds", http.StatusTooManyRequests, func() string { return "1" }, time.Second},
		// Whole seconds: now+2 s truncated is more than 1 s away.
		{"503 date", http.StatusServiceUnavailable, func() string { return time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat) }, time.Second},
		{"429 without", http.StatusTooManyRequests, func() string { return "" }, firstReconnectPause},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seen := make(chan time.Time, 2)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen <- time.Now()
				if len(seen) == 1 { // the first: refused for now
					if v := tc.retryAfter(); v != "" {
						w.Header().Set("Retry-After", v)
					}
					status(tc.code)(w, r)
					return
				}
				status(http.StatusNotFound)(w, r) // ends the follow
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var errs []error
			for _, err := range newClient(t, srv.URL).Events(ctx, FromNow) {
				errs = append(errs, err)
			}
			if len(errs) != 2 || StatusCode(errs[0]) != tc.code || StatusCode(errs[1]) != http.StatusNotFound {
				t.Fatalf("Events yielded %v; want a %d, then the 404 it ends on", errs, tc.code)
			}
			first, second := <-seen, <-seen
			if gap := second.Sub(first); gap < tc.atLeast {
				t.Errorf("Events asked again after %v; want at least %v", gap, tc.atLeast)
			}
			if p := ReconnectPause(errs[0]); p < tc.atLeast {
				t.Errorf("ReconnectPause(%v) = %v; want at least %v", errs[0], p, tc.atLeast)
			}
			if p := ReconnectPause(errs[1]); p != 0 {
				t.Errorf("ReconnectPause of the error Events ended on = %v; want 0", p)
			}
		})
	}
}

// The pause before a reconnection: the longer of Events' own and a 429's
// or 503's Retry-After, which is waited for 30 s at most.
func TestReconnectPause(t *testing.T) {
	t.Parallel()
	refused := func(code int, retryAfter time.Duration) error {
		return fmt.Errorf("wrapped: %w", &Error{StatusCode: code, Message: "for now", RetryAfter: retryAfter})
	}
	for _, tc := range []struct {
		pause time.Duration
		err   error
		want  time.Duration
	}{
		{firstReconnectPause, refused(http.StatusTooManyRequests, 5*time.Second), 5 * time.Second},
		{firstReconnectPause, refused(http.StatusServiceUnavailable, 5*time.Second), 5 * time.Second},
		{8 * time.Second, refused(http.StatusServiceUnavailable, 5*time.Second), 8 * time.Second},
		{firstReconnectPause, refused(http.StatusTooManyRequests, time.Hour), lastReconnectPause},
		{firstReconnectPause, refused(http.StatusTooManyRequests, 0), firstReconnectPause},
		{firstReconnectPause, refused(http.StatusBadGateway, 5*time.Second), firstReconnectPause},
		{2 * time.Second, errStreamEnded, 2 * time.Second},
	} {
		if got := reconnectPause(tc.pause, tc.err); got != tc.want {
			t.Errorf("reconnectPause(%v, %v) = %v, want %v", tc.pause, tc.err, got, tc.want)
		}
	}
}

// A server certificate that does not verify ends Events: reconnecting
// would meet the same certificate. The server is never asked.
func TestEventsEndOnUntrustedCertificate(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, tc := range []struct {
		name string
		c    *Client
		says string
	}{
		// The system's roots do not hold httptest's certificate.
		{"unknown authority", newClient(t, srv.URL), "certificate signed by unknown authority"},
		// Trusted, but issued for 127.0.0.1, ::1 and example.com, not localhost.
		{"another name", newClient(t, "https://localhost:"+port, WithHTTPClient(srv.Client())), "not localhost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := endsOnFirst(t, tc.c)
			if !Permanent(err) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Events yielded %v (Permanent %v); want a permanent error saying %q", err, Permanent(err), tc.says)
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the server got %d requests", n)
	}
	// As a tls.Config's own VerifyConnection may return them: bare.
	for _, err := range []error{
		x509.UnknownAuthorityError{},
		x509.HostnameError{Certificate: &x509.Certificate{DNSNames: []string{"example.com"}}, Host: "plants.example"},
		x509.CertificateInvalidError{Reason: x509.Expired},
		&tls.CertificateVerificationError{Err: errors.New("expired")},
	} {
		if wrapped := fmt.Errorf("get: %w", err); !Permanent(wrapped) {
			t.Errorf("Permanent(%v) = false", wrapped)
		}
	}
}

// A malformed event ends Events after the events before it: the server
// would send it again at every reconnection. The error names it.
func TestEventsEndOnMalformedEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, block, says string
	}{
		{"not JSON", "id: 2\ndata: {\"id\": 2, \"type\n", "the server sent a malformed event 2: "},
		{"not an event", "id: 2\ndata: [2]\n", "the server sent a malformed event 2: json: cannot unmarshal array"},
		{"no id", "data: {\"type\": \"plant.created\"}\n", "the server sent a malformed event (after event 1): no id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := endAfterEventOne(t, tc.block); !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Events ended on %q; want it to say %q", err, tc.says)
			}
		})
	}
}

// An event longer than the 1 MiB a line may be ends Events after the
// events before it, as a malformed one does: the server would send it
// again at every reconnection. The error says what and where.
func TestEventsEndOnEventTooLong(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxEventLine)
	for _, tc := range []struct {
		name, block, says string
	}{
		{"data", "id: 2\ndata: {\"id\": 2, \"type\": \"" + long + "\"}\n", "the server sent an event longer than 1 MiB (event 2, after event 1)"},
		{"no id", ": " + long + "\n", "the server sent an event longer than 1 MiB (after event 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := endAfterEventOne(t, tc.block); err.Error() != "plantstore: "+tc.says {
				t.Errorf("Events ended on %q; want it to say %q", err, tc.says)
			}
		})
	}
}

// An https base URL at a server of plain HTTP ends Events: it serves no
// TLS there, at every reconnection. So too when the client's transport
// wraps the TLS error, which http.Client then leaves as it is.
func TestEventsEndOnPlainHTTPServer(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
	}))
	defer srv.Close()
	base := "https://" + srv.Listener.Addr().String()
	wrapping := &http.Client{Transport: wrapErrors{http.DefaultTransport}}
	for _, tc := range []struct {
		name string
		c    *Client
	}{
		{"net/http's error", newClient(t, base)},
		{"the TLS error wrapped", newClient(t, base, WithHTTPClient(wrapping))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := endsOnFirst(t, tc.c)
			want := "plantstore: the server at " + base + " answered in plain HTTP, not HTTPS: http: server gave HTTP response to HTTPS client"
			if !Permanent(err) || err.Error() != want || !errors.Is(err, http.ErrSchemeMismatch) {
				t.Errorf("Events yielded %q (Permanent %v); want a permanent error saying %q", err, Permanent(err), want)
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the server got %d requests", n)
	}
}

// wrapErrors is a RoundTripper that wraps the errors of its own.
type wrapErrors struct{ http.RoundTripper }

func (w wrapErrors) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.RoundTripper.RoundTrip(r)
	if err != nil {
		return nil, fmt.Errorf("wrapped: %w", err)
	}
	return resp, nil
}

// endAfterEventOne follows a server that sends event 1 and then block on
// every request, checks that Events yields event 1 and then one permanent
// error, without asking again, and returns that error.
func endAfterEventOne(t *testing.T, block string) error {
	t.Helper()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "id: 1\ndata: {\"id\": 1, \"type\": %q, \"plant\": {\"id\": 7, \"name\": \"Fern\"}}\n\n%s\n", EventCreated, block)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var events []Event
	var errs []error
	for ev, err := range newClient(t, srv.URL).Events(ctx, 0) {
		if err == nil {
			events = append(events, ev)
		} else if errs = append(errs, err); len(errs) == 2 {
			break
		}
	}
	if len(events) != 1 || events[0].ID != 1 || len(errs) != 1 {
		t.Fatalf("Events yielded %v and %v; want event 1, then an error it ends on", events, errs)
	}
	if !Permanent(errs[0]) {
		t.Errorf("Events ended on %q, which is not Permanent", errs[0])
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests; want 1", n)
	}
	return errs[0]
}

// endsOnFirst follows c from now and returns the first thing Events
// yields, an error, checking that Events ended after it.
func endsOnFirst(t *testing.T, c *Client) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var errs []error
	for _, err := range c.Events(ctx, FromNow) {
		if errs = append(errs, err); len(errs) == 2 {
			break
		}
	}
	if len(errs) != 1 || errs[0] == nil || ctx.Err() != nil {
		t.Fatalf("Events yielded %v; want it to end after the first, an error", errs)
	}
	return errs[0]
}
