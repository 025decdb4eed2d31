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
	"slices"
	"strconv"
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
		}, true, []string{"not following a redirect from http://127.0.0.1:", " to " + elsewhere.URL + "/events:", "not sent to another origin"}},
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
		// Each answer as the first request gets it, the one that learns
		// where now is, and as the stream gets it, that request answered.
		for _, stream := range []bool{false, true} {
			if stream && tc.answer == nil {
				continue
			}
			name := tc.name + map[bool]string{false: " at first", true: " to the stream"}[stream]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var requests atomic.Int32
				base := refused
				if tc.answer != nil {
					answer := func(w http.ResponseWriter, r *http.Request) {
						requests.Add(1)
						tc.answer(w, r)
					}
					if stream {
						answer = pagesAnswered(answer)
					}
					srv := httptest.NewServer(http.HandlerFunc(answer))
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
				// (net/http itself sends a request again, once, when the
				// connection it reused, the page's, drops before an answer.)
				if n := requests.Load(); tc.answer != nil && n != 2 && !(stream && tc.name == "connection dropped" && n > 2) {
					t.Errorf("%d requests; want 2, one a reconnection", n)
				}
			})
		}
	}
	t.Cleanup(func() {
		if n := leaked.Load(); n != 0 {
			t.Errorf("the other origin got %d requests", n)
		}
	})
}

// followTwice follows, with Events, a server that answers the first
// stream request with first and the second with a 404, which ends the
// follow (a page, asked for where now is, is answered). It returns the
// two errors Events yielded and the time between the stream requests.
func followTwice(t *testing.T, first http.HandlerFunc) (errs []error, gap time.Duration) {
	t.Helper()
	seen := make(chan time.Time, 2)
	srv := httptest.NewServer(pagesAnswered(func(w http.ResponseWriter, r *http.Request) {
		seen <- time.Now()
		if len(seen) == 1 {
			first(w, r)
			return
		}
		status(http.StatusNotFound)(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, err := range newClient(t, srv.URL).Events(ctx, FromNow) {
		errs = append(errs, err)
	}
	if len(errs) != 2 || StatusCode(errs[1]) != http.StatusNotFound {
		t.Fatalf("Events yielded %v; want an error, then the 404 it ends on", errs)
	}
	t1, t2 := <-seen, <-seen
	return errs, t2.Sub(t1)
}

// pagesAnswered answers a request for a page of events, as Events makes
// to learn where now is, as the service does when the feed is empty: no
// events, Latest-Event-Id 0. It leaves streams to stream.
func pagesAnswered(stream http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			stream(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Latest-Event-Id", "0")
		io.WriteString(w, "[]")
	}
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
// again, seconds or an HTTP-date; without one, at least half its own
// first pause.
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
		{"429 without", http.StatusTooManyRequests, func() string { return "" }, firstReconnectPause / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs, gap := followTwice(t, func(w http.ResponseWriter, r *http.Request) { // refused for now
				if v := tc.retryAfter(); v != "" {
					w.Header().Set("Retry-After", v)
				}
				status(tc.code)(w, r)
			})
			if StatusCode(errs[0]) != tc.code {
				t.Fatalf("Events yielded %v first; want a %d", errs[0], tc.code)
			}
			if gap < tc.atLeast {
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

// The waits a reconnection draws from: the upper half of Events' own
// pause and, after a 429 or 503, never less than the Retry-After, with up
// to a quarter more; 30 s at most.
func TestReconnectPause(t *testing.T) {
	t.Parallel()
	refused := func(code int, retryAfter time.Duration) error {
		return fmt.Errorf("wrapped: %w", &Error{StatusCode: code, Message: "for now", RetryAfter: retryAfter})
	}
	for _, tc := range []struct {
		pause     time.Duration
		err       error
		low, high time.Duration
	}{
		{firstReconnectPause, errStreamEnded, 250 * time.Millisecond, 500 * time.Millisecond},
		{2 * time.Second, errStreamEnded, time.Second, 2 * time.Second},
		{lastReconnectPause, errStreamEnded, 15 * time.Second, 30 * time.Second},
		{firstReconnectPause, refused(http.StatusTooManyRequests, 4*time.Second), 4 * time.Second, 5 * time.Second},
		{firstReconnectPause, refused(http.StatusServiceUnavailable, 4*time.Second), 4 * time.Second, 5 * time.Second},
		{8 * time.Second, refused(http.StatusServiceUnavailable, 4*time.Second), 4 * time.Second, 8 * time.Second},
		{8 * time.Second, refused(http.StatusServiceUnavailable, 6*time.Second), 6 * time.Second, 8 * time.Second},
		{16 * time.Second, refused(http.StatusServiceUnavailable, 4*time.Second), 8 * time.Second, 16 * time.Second},
		{firstReconnectPause, refused(http.StatusTooManyRequests, 28*time.Second), 28 * time.Second, 30 * time.Second},
		{firstReconnectPause, refused(http.StatusTooManyRequests, time.Hour), 30 * time.Second, 30 * time.Second},
		{firstReconnectPause, refused(http.StatusTooManyRequests, 0), 250 * time.Millisecond, 500 * time.Millisecond},
		{firstReconnectPause, refused(http.StatusBadGateway, 5*time.Second), 250 * time.Millisecond, 500 * time.Millisecond},
	} {
		low, high := reconnectWindow(tc.pause, tc.err)
		if low != tc.low || high != tc.high {
			t.Errorf("reconnectWindow(%v, %v) = %v, %v; want %v, %v", tc.pause, tc.err, low, high, tc.low, tc.high)
		}
		for range 20 {
			if d := reconnectPause(tc.pause, tc.err); d < low || d > high {
				t.Errorf("reconnectPause(%v, %v) = %v, out of %v to %v", tc.pause, tc.err, d, low, high)
			}
		}
	}
}

// A stream's retry field, as the SSE standard defines it, sets the pause
// of the reconnection after it: the last valid one, within 0.5 s and
// 30 s. A value that is not ASCII digits alone, or too long, is ignored.
// Seen through real streams, on the first reconnection, not waited.
func TestEventsRetryField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, lines string
		start       time.Duration // the pause it sets
	}{
		{"none", ": events after 0\n", firstReconnectPause},
		{"1500", "retry: 1500\n", 1500 * time.Millisecond},
		{"no space", "retry:1500\n", 1500 * time.Millisecond},
		{"leading zeros", "retry: 03000\n", 3 * time.Second},
		{"many leading zeros", "retry: 3000\nretry: 0000000000001500\n", 1500 * time.Millisecond},
		{"0", "retry: 0\n", firstReconnectPause},
		{"under the floor", "retry: 100\n", firstReconnectPause},
		{"over 30 s", "retry: 600000\n", lastReconnectPause},
		{"9 digits", "retry: 999999999\n", lastReconnectPause},
		{"the last", "retry: 3000\nretry: 1200\n", 1200 * time.Millisecond},
		{"in a block with an event", "retry: 1500\nid: 1\ndata: {\"id\": 1, \"type\": \"plant.created\"}\n", 1500 * time.Millisecond},
		// Each invalid value after a valid one, which stands.
		{"letters", "retry: 3000\nretry: 1000x\n", 3 * time.Second},
		{"negative", "retry: 3000\nretry: -1000\n", 3 * time.Second},
		{"plus", "retry: 3000\nretry: +1000\n", 3 * time.Second},
		{"decimal", "retry: 3000\nretry: 1.5\n", 3 * time.Second},
		{"exponent", "retry: 3000\nretry: 1e3\n", 3 * time.Second},
		{"two spaces", "retry: 3000\nretry:  1000\n", 3 * time.Second},
		{"trailing space", "retry: 3000\nretry: 1000 \n", 3 * time.Second},
		{"empty", "retry: 3000\nretry:\n", 3 * time.Second},
		{"no colon", "retry: 3000\nretry\n", 3 * time.Second},
		{"not ASCII digits", "retry: 3000\nretry: \u0661\u0660\u0660\u0660\n", 3 * time.Second},
		{"10 digits", "retry: 3000\nretry: 1000000000\n", 3 * time.Second},
		{"absurdly long", "retry: 3000\nretry: " + strings.Repeat("9", 1000) + "\n", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(stream(tc.lines + "\n"))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var first error
			for _, err := range newClient(t, srv.URL).Events(ctx, FromNow) {
				if err != nil {
					first = err
					break
				}
			}
			if !errors.Is(first, errStreamEnded) {
				t.Fatalf("Events yielded %v; want the stream's end", first)
			}
			if p := ReconnectPause(first); p < tc.start/2 || p > tc.start {
				t.Errorf("ReconnectPause = %v; want %v to %v", p, tc.start/2, tc.start)
			}
		})
	}
}

// The pause a retry field sets is the one Events waits, over a real
// reconnection: a stream's "retry: 1500" has it ask again after at
// least 0.75 s, not 0.5 s or less.
func TestEventsWaitRetryField(t *testing.T) {
	t.Parallel()
	errs, gap := followTwice(t, stream("retry: 1500\n\n"))
	if !errors.Is(errs[0], errStreamEnded) {
		t.Fatalf("Events yielded %v first; want the stream's end", errs[0])
	}
	p := ReconnectPause(errs[0])
	if p < 750*time.Millisecond || p > 1500*time.Millisecond {
		t.Errorf("ReconnectPause = %v; want 0.75 s to 1.5 s", p)
	}
	if gap < p {
		t.Errorf("Events asked again after %v; want at least the %v it said", gap, p)
	}
}

// Through a run of reconnections: the pause starts from the retry field,
// doubles while a reconnection yields no event, is back to its start
// after one that does, and each wait is the one ReconnectPause tells.
func TestEventsPauses(t *testing.T) {
	t.Parallel()
	srv := scripted(
		stream("retry: 3000\n\n"),          // 1.5 to 3 s
		stream(": nothing\n\n"),            // doubled: 3 to 6 s
		stream(eventBlock(1)),              // back to 3 s: 1.5 to 3 s
		stream("retry: 1000\n\n"),          // doubled, not shortened: 3 to 6 s
		stream(eventBlock(2)),              // back to the new start, 1 s: 0.5 to 1 s
		stream(": nothing\n\n"),            // 1 to 2 s
		status(http.StatusTooManyRequests), // 2 to 4 s
	)
	defer srv.Close()
	windows := [][2]time.Duration{
		{1500 * time.Millisecond, 3 * time.Second},
		{3 * time.Second, 6 * time.Second},
		{1500 * time.Millisecond, 3 * time.Second},
		{3 * time.Second, 6 * time.Second},
		{500 * time.Millisecond, time.Second},
		{time.Second, 2 * time.Second},
		{2 * time.Second, 4 * time.Second},
	}
	waits, errs := followWaits(t, srv.URL)
	if len(errs) != len(windows)+1 || StatusCode(errs[len(errs)-1]) != http.StatusNotFound {
		t.Fatalf("Events yielded %v; want %d errors, then the 404 it ends on", errs, len(windows))
	}
	for i, w := range windows {
		if waits[i] != ReconnectPause(errs[i]) {
			t.Errorf("reconnection %d: waited %v, ReconnectPause %v", i+1, waits[i], ReconnectPause(errs[i]))
		}
		if waits[i] < w[0] || waits[i] > w[1] {
			t.Errorf("reconnection %d waited %v; want %v to %v", i+1, waits[i], w[0], w[1])
		}
	}
}

// Followers cut off together do not come back together: each wait is
// drawn from the upper half of the pause.
func TestEventsPausesJittered(t *testing.T) {
	t.Parallel()
	var answers []http.HandlerFunc
	for id := 1; id <= 20; id++ { // an event each, so the pause stays 0.5 s
		answers = append(answers, stream(eventBlock(id)))
	}
	srv := scripted(answers...)
	defer srv.Close()
	waits, _ := followWaits(t, srv.URL)
	if len(waits) != len(answers) {
		t.Fatalf("%d reconnections; want %d", len(waits), len(answers))
	}
	distinct := map[time.Duration]bool{}
	for _, d := range waits {
		distinct[d] = true
		if d < firstReconnectPause/2 || d > firstReconnectPause {
			t.Errorf("waited %v; want %v to %v", d, firstReconnectPause/2, firstReconnectPause)
		}
	}
	if len(distinct) < 2 {
		t.Errorf("waits %v, all the same; want them spread", waits)
	}
}

// A Retry-After stays a floor: the wait is never shorter, and the jitter
// adds above it, up to a quarter more and 30 s at most, so followers
// refused together are spread too. Seen through real answers.
func TestEventsRetryAfterFloor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code       int
		retryAfter string
		low, high  time.Duration
	}{
		{http.StatusTooManyRequests, "2", 2 * time.Second, 2500 * time.Millisecond},
		{http.StatusServiceUnavailable, "20", 20 * time.Second, 25 * time.Second},
		{http.StatusTooManyRequests, "3600", 30 * time.Second, 30 * time.Second},
	} {
		t.Run(fmt.Sprintf("%d %s", tc.code, tc.retryAfter), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", tc.retryAfter)
				status(tc.code)(w, r)
			}))
			defer srv.Close()
			c := newClient(t, srv.URL)
			distinct := map[time.Duration]bool{}
			for range 10 {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				var first error
				for _, err := range c.Events(ctx, FromNow) {
					first = err
					break
				}
				cancel()
				if StatusCode(first) != tc.code {
					t.Fatalf("Events yielded %v; want a %d", first, tc.code)
				}
				p := ReconnectPause(first)
				if p < tc.low || p > tc.high {
					t.Errorf("ReconnectPause = %v; want %v to %v", p, tc.low, tc.high)
				}
				distinct[p] = true
			}
			if tc.low < tc.high && len(distinct) < 2 {
				t.Errorf("pauses all %v; want them spread above the Retry-After", tc.low)
			}
		})
	}
}

// stream answers an event stream of lines, then ends it.
func stream(lines string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, lines)
	}
}

// eventBlock is event id as a stream carries it.
func eventBlock(id int) string {
	return fmt.Sprintf("id: %d\ndata: {\"id\": %d, \"type\": %q}\n\n", id, id, EventCreated)
}

// scripted is a server that gives the nth request the nth answer, and a
// 404 to those after the last.
func scripted(answers ...http.HandlerFunc) *httptest.Server {
	var requests atomic.Int32
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := int(requests.Add(1)); n <= len(answers) {
			answers[n-1](w, r)
			return
		}
		status(http.StatusNotFound)(w, r)
	}))
}

// followWaits follows base from event 0 until Events ends, without
// waiting its pauses, and returns the pauses it would have waited and
// the errors it yielded.
func followWaits(t *testing.T, base string) (waits []time.Duration, errs []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	noWait := func(ctx context.Context, d time.Duration) bool {
		waits = append(waits, d)
		return true
	}
	for _, err := range newClient(t, base).events(ctx, 0, nil, noWait) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("Events did not end in 20 s: %v", errs)
	}
	return waits, errs
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
		// Many data lines, each short, are one event: no bound on each
		// alone may hold it.
		{"many data lines", "id: 2\n" + strings.Repeat("data: "+strings.Repeat("x", 1000)+"\n", 1100), "the server sent an event longer than 1 MiB (event 2, after event 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := endAfterEventOne(t, tc.block); err.Error() != "plantstore: "+tc.says {
				t.Errorf("Events ended on %q; want it to say %q", err, tc.says)
			}
		})
	}
}

// A stream that sends nothing, not even a keep-alive, for the client's
// silence (here 300 ms), answer head included, is read again from where
// it was; the events go on, none missed, none twice.
func TestEventsReconnectAfterSilence(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch requests.Add(1) {
		case 1: // the head never comes
			<-r.Context().Done()
			return
		case 2: // one event, then silence
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "id: 1\ndata: {\"id\": 1, \"type\": \"plant.created\"}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		if got := r.Header.Get("Last-Event-ID"); got != "1" {
			t.Errorf("reconnected with Last-Event-ID %q, want 1", got)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "id: 2\ndata: {\"id\": 2, \"type\": \"plant.created\"}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, WithStreamSilence(300*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var ids []int64
	var silences int
	for e, err := range c.events(ctx, 0, nil, func(context.Context, time.Duration) bool { return true }) {
		if err != nil {
			if !errors.Is(err, errStreamSilent) {
				t.Fatalf("Events yielded %v, want only silences", err)
			}
			silences++
			continue
		}
		if ids = append(ids, e.ID); len(ids) == 2 {
			break
		}
	}
	if fmt.Sprint(ids) != "[1 2]" || silences != 2 {
		t.Errorf("events %v after %d silences; want [1 2] after 2 (the head, then the stream)", ids, silences)
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

// A follow from now learns where now is first, from a page's
// Latest-Event-Id, and streams after it from its first stream on: a
// stream refused at first (429, 503, a broken connection) is asked for
// again after the same id, so the events made in between are not
// missed. The page itself is asked for again, as a stream is, after an
// error that may pass; a server whose page has no Latest-Event-Id is
// followed from now, as before.
func TestEventsFromNowKeepsItsStart(t *testing.T) {
	t.Parallel()
	page := func(latest string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("limit") != "1" {
				t.Errorf("page asked as %s; want limit=1", r.URL)
			}
			if latest != "" {
				w.Header().Set("Latest-Event-Id", latest)
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, "[]")
		}
	}
	dropped := func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}
	for _, tc := range []struct {
		name    string
		pages   []http.HandlerFunc // in turn; the last again
		streams []http.HandlerFunc // in turn, then a 404 that ends it
		// The Last-Event-ID of each stream request, "" for none.
		lastEventIDs []string
		events       []int64
	}{
		{"refused, then streamed", []http.HandlerFunc{page("41")},
			[]http.HandlerFunc{status(http.StatusTooManyRequests), status(http.StatusServiceUnavailable), dropped, stream(eventBlock(42))},
			[]string{"41", "41", "41", "41"}, []int64{42}},
		{"the page refused first", []http.HandlerFunc{status(http.StatusTooManyRequests), status(http.StatusServiceUnavailable), status(http.StatusBadGateway), page("7")},
			[]http.HandlerFunc{stream(eventBlock(8))},
			[]string{"7"}, []int64{8}},
		{"an empty feed", []http.HandlerFunc{page("0")},
			[]http.HandlerFunc{status(http.StatusTooManyRequests), stream(eventBlock(1))},
			[]string{"0", "0"}, []int64{1}},
		{"no Latest-Event-Id", []http.HandlerFunc{page("")},
			[]http.HandlerFunc{status(http.StatusTooManyRequests), stream(": events after 5\n\n"), stream(eventBlock(6))},
			[]string{"", "", "5"}, []int64{6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var pages, streams atomic.Int32
			lastEventIDs := make(chan string, 100)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
					n := int(pages.Add(1))
					tc.pages[min(n, len(tc.pages))-1](w, r)
					return
				}
				lastEventIDs <- r.Header.Get("Last-Event-ID")
				if n := int(streams.Add(1)); n <= len(tc.streams) {
					tc.streams[n-1](w, r)
					return
				}
				status(http.StatusNotFound)(w, r)
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			noWait := func(context.Context, time.Duration) bool { return true }
			var events []int64
			var errs []error
			for ev, err := range newClient(t, srv.URL).events(ctx, FromNow, nil, noWait) {
				if err != nil {
					errs = append(errs, err)
				} else {
					events = append(events, ev.ID)
				}
			}
			if !slices.Equal(events, tc.events) {
				t.Errorf("Events yielded events %v; want %v", events, tc.events)
			}
			if len(errs) == 0 || StatusCode(errs[len(errs)-1]) != http.StatusNotFound {
				t.Fatalf("Events yielded %v; want it to end on the 404", errs)
			}
			for _, err := range errs[:len(errs)-1] {
				if Permanent(err) || ReconnectPause(err) == 0 {
					t.Errorf("Events yielded %v, which it does not reconnect after", err)
				}
			}
			close(lastEventIDs)
			var got []string
			for id := range lastEventIDs {
				got = append(got, id)
			}
			// The 404's request after the streams asked for, after the last event.
			want := append(tc.lastEventIDs, strconv.FormatInt(tc.events[len(tc.events)-1], 10))
			if !slices.Equal(got, want) {
				t.Errorf("the streams were asked for with Last-Event-ID %q; want %q", got, want)
			}
			if n, want := int(pages.Load()), len(tc.pages); n != want {
				t.Errorf("%d pages asked for; want %d, once where now is was learned", n, want)
			}
		})
	}
}

// The time the loop spends on an event is not the stream's silence: a
// consumer slower than WithStreamSilence on one event, on a stream that
// keeps talking, is not cut off and reconnected.
func TestEventsSlowConsumerIsNoSilence(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, eventBlock(1))
		w.(http.Flusher).Flush()
		for range 8 { // keep-alives, then the next event
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			fmt.Fprint(w, ": keep-alive\n\n")
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, eventBlock(2))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, WithStreamSilence(300*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var ids []int64
	for e, err := range c.events(ctx, 0, nil, func(context.Context, time.Duration) bool { return true }) {
		if err != nil {
			t.Fatalf("after events %v: %v; want none, the stream never fell silent", ids, err)
		}
		if ids = append(ids, e.ID); len(ids) == 2 {
			break
		}
		time.Sleep(600 * time.Millisecond) // twice the silence, on event 1
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests, want the one stream", n)
	}
}
