package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/httpapi"
)

// wantRetryAfter checks a refusal by a limit: the status, the Error body
// and a Retry-After of whole seconds, at least 1. It returns the wait.
func wantRetryAfter(t *testing.T, resp *http.Response, body []byte, status int, words ...string) time.Duration {
	t.Helper()
	wantError(t, resp, body, status, words...)
	seconds, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || seconds < 1 {
		t.Fatalf("%d with Retry-After %q, want whole seconds, at least 1", status, resp.Header.Get("Retry-After"))
	}
	return time.Duration(seconds) * time.Second
}

// Each token has its own allowance; past it every plant operation answers
// 429 with Retry-After, and the allowance comes back with time.
func TestTokenRateLimit(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{cfg: httpapi.Config{TokenRate: 1, TokenBurst: len(everyOperation)}})
		began := time.Now()
		for _, op := range everyOperation {
			if resp, body := e.send(op.method, op.path, op.body, nil); resp.StatusCode >= 300 {
				t.Fatalf("%s %s within the burst: %d %s", op.method, op.path, resp.StatusCode, body)
			}
		}
		var wait time.Duration
		refilled := 0
		for _, op := range everyOperation {
			resp, body := e.send(op.method, op.path, op.body, nil)
			// The allowance comes back at a request a second: on a busy
			// machine the requests so far may have taken that long.
			if resp.StatusCode < 300 && refilled < int(time.Since(began).Seconds()) {
				refilled++
				continue
			}
			wait = wantRetryAfter(t, resp, body, http.StatusTooManyRequests, "rate limit")
		}
		if refilled == len(everyOperation) {
			t.Fatalf("no request refused: the %d requests past the burst took %v", refilled, time.Since(began))
		}
		// Another token is not held back by the first, nor are the endpoints
		// without a token.
		auth := map[string]string{"Authorization": "Bearer " + e.readToken}
		if resp, body := e.do("GET", "/plants", auth, nil); resp.StatusCode != 200 {
			t.Errorf("another token: %d %s", resp.StatusCode, body)
		}
		for _, path := range []string{"/healthz", "/readyz", "/openapi.json"} {
			if resp, body := e.do("GET", path, nil, nil); resp.StatusCode != 200 {
				t.Errorf("%s: %d %s", path, resp.StatusCode, body)
			}
		}
		logs := e.logs.String()
		if !strings.Contains(logs, `"status":429,`) || !strings.Contains(logs, `"token":"writer","remote":`) || !strings.Contains(logs, `"limit":"token_rate"`) {
			t.Errorf("the access log does not say which token was limited:\n%s", logs)
		}
		if strings.Contains(logs, e.writeToken) {
			t.Error("the token's secret is in the log")
		}
		time.Sleep(wait)
		if resp, body := e.send("GET", "/plants", "", nil); resp.StatusCode != 200 {
			t.Errorf("after Retry-After: %d %s", resp.StatusCode, body)
		}
	})
}

// countingLookups counts the token lookups that reach the store.
type countingLookups struct {
	plantstore.Store
	n *atomic.Int64
}

func (s countingLookups) TokenByHash(ctx context.Context, hash plantstore.TokenHash) (plantstore.Token, error) {
	s.n.Add(1)
	return s.Store.TokenByHash(ctx, hash)
}

// After the allowed number of refused tokens, an address gets 429 for
// every plant operation with a token the service has not found valid
// before, which is not looked at: further guesses are not checked, and a
// valid token the service has never seen waits too. A token it has found
// valid before is served: a stranger's guesses from a shared address (a
// proxy, a NAT) cannot lock its users out. Time gives the address one
// attempt at a time back.
func TestAuthFailuresThrottleAddress(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		const allowed = 3
		var lookups, rosterReads atomic.Int64
		e := start(t, options{
			cfg: httpapi.Config{AuthFailures: allowed, AuthFailureWindow: 6 * time.Second},
			wrap: func(s plantstore.Store) plantstore.Store {
				return countingRosterReads{countingLookups{s, &lookups}, &rosterReads}
			},
			// The roster of active tokens is read as the server starts,
			// and not again here: TestAuthFailuresThrottleSparesRosterTokens
			// has it.
			rosterInterval: time.Hour,
		})
		guess := func() (*http.Response, []byte) {
			return e.do("GET", "/plants/1", map[string]string{"Authorization": "Bearer " + plantstore.NewToken()}, nil)
		}
		// The write token is used once before the guesses; the read token
		// is not.
		if resp, body := e.send("GET", "/plants", "", nil); resp.StatusCode != 200 {
			t.Fatalf("the write token: %d %s", resp.StatusCode, body)
		}
		lookups.Store(0)
		// Requests without a token are not guesses and do not count.
		for range 2 * allowed {
			resp, body := e.do("GET", "/plants", nil, nil)
			wantError(t, resp, body, 401)
		}
		for range allowed {
			resp, body := guess()
			wantError(t, resp, body, 401)
		}
		if n := lookups.Load(); n != allowed {
			t.Fatalf("%d token lookups for %d guesses", n, allowed)
		}
		var wait time.Duration
		for range 20 {
			resp, body := guess()
			wait = wantRetryAfter(t, resp, body, http.StatusTooManyRequests, "failed authentications")
		}
		if n := lookups.Load(); n != allowed {
			t.Errorf("%d token lookups: guesses past the limit were checked", n-allowed)
		}
		for _, op := range everyOperation {
			if resp, body := e.send(op.method, op.path, op.body, nil); resp.StatusCode >= 300 { // the write token, known
				t.Errorf("%s %s with a known valid token from a throttled address: %d %s", op.method, op.path, resp.StatusCode, body)
			}
		}
		// A valid token made after the roster was read, never seen.
		for rosterReads.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		fresh := e.issue("fresh", plantstore.ScopePlantsRead)
		resp, body := e.do("GET", "/plants", map[string]string{"Authorization": "Bearer " + fresh}, nil)
		wantRetryAfter(t, resp, body, http.StatusTooManyRequests, "failed authentications")
		// The routes without a token are served: no guess is made there,
		// and a readiness probe behind the same NAT as the guesser must
		// not fail for it.
		for _, path := range []string{"/readyz", "/", "/openapi.json", "/docs"} {
			if resp, body := e.do("GET", path, nil, nil); resp.StatusCode != 200 {
				t.Errorf("GET %s without a token from a throttled address: %d %s", path, resp.StatusCode, body)
			}
		}
		if resp, body := e.do("GET", "/healthz", nil, nil); resp.StatusCode != 200 {
			t.Errorf("/healthz from a throttled address: %d %s", resp.StatusCode, body)
		}
		logs := e.logs.String()
		if n := strings.Count(logs, "client address throttled"); n != 1 {
			t.Errorf("the throttling is logged %d times, want once:\n%s", n, logs)
		}
		if !strings.Contains(logs, `"address":"127.0.0.1"`) || !strings.Contains(logs, `"limit":"auth_failures"`) {
			t.Errorf("the log does not name the address and the limit:\n%s", logs)
		}

		time.Sleep(wait)
		if resp, body := e.do("GET", "/plants", map[string]string{"Authorization": "Bearer " + fresh}, nil); resp.StatusCode != 200 {
			t.Errorf("a valid token never seen, after Retry-After: %d %s", resp.StatusCode, body)
		}
		// One attempt came back, and one only.
		before := lookups.Load()
		resp, body = guess()
		wantError(t, resp, body, 401)
		resp, body = guess()
		wantRetryAfter(t, resp, body, http.StatusTooManyRequests)
		if n := lookups.Load() - before; n != 1 {
			t.Errorf("%d guesses checked after Retry-After, want 1", n)
		}
	})
}

// A valid token that this server has not seen yet, from an address a
// guesser keeps throttled, is served once the roster of active tokens
// has been read again, however fast the guesses come: they would take
// every attempt the address regains. The guesses still reach the store
// only as attempts come back.
func TestAuthFailuresThrottleSparesRosterTokens(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		const allowed = 3
		var lookups atomic.Int64
		e := start(t, options{
			cfg:            httpapi.Config{AuthFailures: allowed, AuthFailureWindow: 6 * time.Second}, // one back every 2 s
			wrap:           func(s plantstore.Store) plantstore.Store { return countingLookups{s, &lookups} },
			rosterInterval: 200 * time.Millisecond,
		})
		ctx, stop := context.WithCancel(context.Background())
		var guesser sync.WaitGroup
		guesser.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/plants/1", nil)
				req.Header.Set("Authorization", "Bearer "+plantstore.NewToken())
				if resp, err := e.client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
		defer func() { stop(); guesser.Wait() }()
		for lookups.Load() < allowed {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // throttled now
		late := e.issue("late", plantstore.ScopePlantsRead)
		began := time.Now()
		for {
			resp, body := e.do("GET", "/plants", map[string]string{"Authorization": "Bearer " + late}, nil)
			if resp.StatusCode == 200 {
				break
			}
			wantRetryAfter(t, resp, body, http.StatusTooManyRequests, "failed authentications")
			if time.Since(began) > 5*time.Second {
				t.Fatalf("a valid token new to the server, from an address a guesser keeps throttled: still 429 after %v", time.Since(began).Round(time.Millisecond))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("served after %v; the roster is read every 200 ms", took.Round(time.Millisecond))
		}
		// The guesses were answered without a lookup, but for the
		// attempts the address regained meanwhile (one every 2 s).
		if n, most := lookups.Load(), int64(allowed+1+time.Since(began)/(2*time.Second)+1); n > most {
			t.Errorf("%d token lookups, at most %d expected: guesses were checked", n, most)
		}
	})
}

// A valid token new to the server, refused while its address is
// throttled, is told to retry when the roster is next read (every 5 s by
// default), not after the address's whole back-off (here 10 minutes),
// and is served when it does.
func TestAuthFailuresRetryAfterTheRoster(t *testing.T) {
	const allowed = 3
	e := start(t, options{cfg: httpapi.Config{AuthFailures: allowed, AuthFailureWindow: 30 * time.Minute}})
	guess := map[string]string{"Authorization": "Bearer " + plantstore.NewToken()}
	for range allowed {
		resp, body := e.do("GET", "/plants", guess, nil)
		wantError(t, resp, body, http.StatusUnauthorized)
	}
	resp, body := e.do("GET", "/plants", guess, nil)
	if wait := wantRetryAfter(t, resp, body, http.StatusTooManyRequests, "failed authentications"); wait > 5*time.Second {
		t.Errorf("a throttled guess: Retry-After %v, want the roster's next reading, within 5 s", wait)
	}
	late := map[string]string{"Authorization": "Bearer " + e.issue("late", plantstore.ScopePlantsRead)}
	resp, body = e.do("GET", "/plants", late, nil)
	if resp.StatusCode == 200 {
		t.Fatal("a token made after the roster's reading was served from a throttled address; the test shows nothing")
	}
	wait := wantRetryAfter(t, resp, body, http.StatusTooManyRequests, "failed authentications")
	if wait > 5*time.Second {
		t.Fatalf("a valid token new to the server: Retry-After %v, want the roster's next reading, within 5 s", wait)
	}
	time.Sleep(wait)
	resp, body = e.do("GET", "/plants", late, nil)
	if resp.StatusCode == http.StatusTooManyRequests {
		// The reading fell due as the retry came (a busy machine): the
		// next Retry-After, a second or so, is the rest of its wait.
		again := wantRetryAfter(t, resp, body, http.StatusTooManyRequests, "failed authentications")
		if again > 2*time.Second {
			t.Fatalf("retried after its Retry-After, told to wait %v more", again)
		}
		time.Sleep(again)
		resp, body = e.do("GET", "/plants", late, nil)
	}
	if resp.StatusCode != 200 {
		t.Errorf("retried after Retry-After: %d %s, want 200", resp.StatusCode, body)
	}
}

// Guesses sent together are counted as they come, not once each has been
// checked: no more than the allowed attempts reach the store, however
// many race in, and a valid token's lookup meanwhile takes no attempt.
func TestAuthFailuresThrottleConcurrentGuesses(t *testing.T) {
	const allowed = 5
	var lookups atomic.Int64
	e := start(t, options{
		cfg:  httpapi.Config{AuthFailures: allowed, AuthFailureWindow: time.Minute},
		wrap: func(s plantstore.Store) plantstore.Store { return countingLookups{s, &lookups} },
	})
	lookups.Store(0)
	var wg sync.WaitGroup
	var refused, throttled atomic.Int64
	start := make(chan struct{})
	for range 80 {
		wg.Go(func() {
			<-start
			resp, _ := e.do("GET", "/plants/1", map[string]string{"Authorization": "Bearer " + plantstore.NewToken()}, nil)
			switch resp.StatusCode {
			case 401:
				refused.Add(1)
			case 429:
				throttled.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := lookups.Load(); n > allowed || refused.Load() > allowed {
		t.Errorf("80 guesses at once: %d checked (%d answered 401, %d 429), want at most %d", n, refused.Load(), throttled.Load(), allowed)
	}
	if refused.Load()+throttled.Load() != 80 {
		t.Errorf("80 guesses: %d answered 401 and %d 429", refused.Load(), throttled.Load())
	}
}

// A valid token the server has not checked yet, sent on many connections
// at once (a client's pool, after a restart), is never throttled: its
// lookups wait for each other rather than take the address's attempts.
func TestValidTokenSentTogetherIsNotThrottled(t *testing.T) {
	e := start(t, options{
		cfg:  httpapi.Config{AuthFailures: 3, AuthFailureWindow: time.Minute},
		wrap: func(s plantstore.Store) plantstore.Store { return slowLookups{s} },
	})
	secret := e.issue("pool", plantstore.ScopePlantsRead)
	var wg sync.WaitGroup
	var notOK atomic.Int64
	start := make(chan struct{})
	for range 64 {
		wg.Go(func() {
			<-start
			if resp, _ := e.do("GET", "/plants", map[string]string{"Authorization": "Bearer " + secret}, nil); resp.StatusCode != 200 {
				notOK.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := notOK.Load(); n > 0 {
		t.Errorf("%d of 64 requests with one valid token were refused", n)
	}
}

// countingRosterReads counts the readings of the active tokens' hashes.
type countingRosterReads struct {
	plantstore.Store
	n *atomic.Int64
}

func (s countingRosterReads) ActiveTokenHashes(ctx context.Context, max int) ([]plantstore.TokenHash, error) {
	s.n.Add(1)
	return s.Store.ActiveTokenHashes(ctx, max)
}

// slowLookups makes each token lookup take a while, as a busy store's
// would: lookups of one token overlap.
type slowLookups struct{ plantstore.Store }

func (s slowLookups) TokenByHash(ctx context.Context, hash plantstore.TokenHash) (plantstore.Token, error) {
	time.Sleep(20 * time.Millisecond)
	return s.Store.TokenByHash(ctx, hash)
}

// X-Forwarded-For names the client only when it comes from a trusted
// proxy: otherwise any client could pose as a fresh address for each guess.
func TestForwardedForOnlyFromTrustedProxies(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		guess := func(e *env, client string) int {
			resp, _ := e.do("GET", "/plants", map[string]string{
				"Authorization": "Bearer " + plantstore.NewToken(), "X-Forwarded-For": client,
			}, nil)
			return resp.StatusCode
		}
		valid := func(e *env, client string) int {
			resp, _ := e.do("GET", "/plants", map[string]string{
				"Authorization": "Bearer " + e.readToken, "X-Forwarded-For": client,
			}, nil)
			return resp.StatusCode
		}

		direct := start(t, options{cfg: httpapi.Config{AuthFailures: 2}})
		for i := range 2 {
			guess(direct, "203.0.113."+strconv.Itoa(i))
		}
		if status := guess(direct, "203.0.113.99"); status != 429 {
			t.Errorf("a guess posing as a new address: %d, want 429", status)
		}

		proxied := start(t, options{cfg: httpapi.Config{
			AuthFailures:   2,
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		}, rosterInterval: time.Hour}) // its read token stays one it has never seen
		guess(proxied, "203.0.113.1")
		guess(proxied, "198.51.100.7, 203.0.113.1") // the left part is the client's to write
		if status := guess(proxied, "203.0.113.1"); status != 429 {
			t.Errorf("a third guess from 203.0.113.1: %d, want 429", status)
		}
		if status := valid(proxied, "203.0.113.1"); status != 429 {
			t.Errorf("a valid token from 203.0.113.1: %d, want 429", status)
		}
		if status := valid(proxied, "203.0.113.2"); status != 200 {
			t.Errorf("another client behind the proxy: %d, want 200", status)
		}
		// The access log names the client behind the proxy, beside the
		// proxy's own address; a direct request's line has no client.
		if logs := proxied.logs.String(); !strings.Contains(logs, `"client":"203.0.113.2"`) || !strings.Contains(logs, `"remote":"127.0.0.1:`) {
			t.Errorf("the access log does not name the client behind the proxy:\n%s", logs)
		}
		if logs := direct.logs.String(); strings.Contains(logs, `"client":`) {
			t.Errorf("the access log names a client for requests from no trusted proxy:\n%s", logs)
		}
	})
}

// The unauthenticated routes that cost something are limited per client
// address; /healthz, which liveness probes ask, never is.
func TestAddressRateOnPublicRoutes(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{cfg: httpapi.Config{AddressRate: 1}}) // bursts of 2
		for _, path := range []string{"/readyz", "/openapi.json", "/openapi.yaml", "/docs", "/docs/redoc-3.0.1.standalone.js"} {
			var last *http.Response
			var body []byte
			for range 3 {
				last, body = e.do("GET", path, nil, nil)
			}
			wantRetryAfter(t, last, body, http.StatusTooManyRequests, "request rate")
		}
		for range 20 {
			if resp, body := e.do("GET", "/healthz", nil, nil); resp.StatusCode != 200 {
				t.Fatalf("/healthz from a limited address: %d %s", resp.StatusCode, body)
			}
		}
		if !strings.Contains(e.logs.String(), `"limit":"address_rate"`) {
			t.Errorf("the access log does not name the limit:\n%s", e.logs)
		}
	})
}

// Ids the service makes begin "ps-"; a caller's id that does, in any
// case, is not kept, so the log never mixes the two up. Others are kept.
func TestRequestIDsToldApart(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		// In any case: a case-blind search of the log (grep -i) would
		// mix "PS-…" up with ours.
		for _, posing := range []string{"ps-0000000000000000-1", "PS-0000000000000000-1", "Ps-x"} {
			resp, _ := e.do("GET", "/healthz", map[string]string{"X-Request-Id": posing}, nil)
			if got := resp.Header.Get("X-Request-Id"); got == posing || !strings.HasPrefix(got, "ps-") {
				t.Errorf("a caller's id posing as ours, %q: answered with %q", posing, got)
			}
		}
		resp, _ := e.do("GET", "/healthz", map[string]string{"X-Request-Id": "trace-7"}, nil)
		if got := resp.Header.Get("X-Request-Id"); got != "trace-7" {
			t.Errorf("a caller's plain id: answered with %q", got)
		}
		// Sent twice (a proxy adding its own beside the client's), the id
		// is ambiguous: neither is kept, whichever the case of the names.
		resp, _ = e.raw("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: trace-8\r\nx-request-id: trace-9\r\nConnection: close\r\n\r\n")
		if got := resp.Header.Get("X-Request-Id"); !strings.HasPrefix(got, "ps-") {
			t.Errorf("an id sent twice: answered with %q", got)
		}
		resp, _ = e.raw("GET /healthz HTTP/1.1\r\nHost: x\r\nx-request-id: trace-10\r\nConnection: close\r\n\r\n")
		if got := resp.Header.Get("X-Request-Id"); got != "trace-10" {
			t.Errorf("a caller's id in lower case: answered with %q", got)
		}
		// A token sent as the id by mistake is neither kept nor logged:
		// its prefix in any case, or its secret alone, in a longer id too.
		secret := strings.TrimPrefix(e.readToken, "pst_")
		for _, id := range []string{e.readToken, "trace-" + e.readToken, "PST_" + secret, secret, "a" + secret, "trace-" + secret + "-7"} {
			resp, _ = e.do("GET", "/plants/1", map[string]string{"X-Request-Id": id, "Authorization": "Bearer " + e.writeToken}, nil)
			if got := resp.Header.Get("X-Request-Id"); !strings.HasPrefix(got, "ps-") {
				t.Errorf("a token as the id: answered with %q", got)
			}
		}
		if logs := e.logs.String(); strings.Contains(logs, secret) {
			t.Errorf("a token sent as X-Request-Id is in the log:\n%s", logs)
		}
	})
}

// A token sent in the path by mistake, where an id or a route belongs,
// is masked in the access log; the rest of the path is kept.
func TestTokenInPathNotLogged(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		secret := strings.TrimPrefix(e.readToken, "pst_")
		for _, path := range []string{"/plants/" + e.readToken, "/x" + e.readToken + "/y", "/plants/" + e.readToken + e.readToken, "/plants/pst_" + e.readToken,
			"/plants/PST_" + secret, "/Pst_" + secret, "/plants/" + secret, "/plants/1" + secret + "/z"} {
			if resp, _ := e.do("GET", path, map[string]string{"Authorization": "Bearer " + e.writeToken}, nil); resp.StatusCode/100 != 4 {
				t.Errorf("GET %s: %d", path, resp.StatusCode)
			}
		}
		// Sent as the method, by a mistake of the same kind.
		if resp, _ := e.do(e.readToken, "/plants", nil, nil); resp.StatusCode/100 != 4 {
			t.Errorf("the token as the method: %d", resp.StatusCode)
		}
		logs := e.logs.String()
		if strings.Contains(logs, secret) {
			t.Errorf("a token sent in the path is in the log:\n%s", logs)
		}
		for _, want := range []string{`"path":"/plants/pst_xxxxx"`, `"path":"/xpst_xxxxx/y"`, `"path":"/plants/pst_xxxxx"`, `"method":"pst_xxxxx"`,
			`"path":"/plants/PST_xxxxx"`, `"path":"/Pst_xxxxx"`, `"path":"/plants/xxxxx"`, `"path":"/plants/xxxxx/z"`} {
			if !strings.Contains(logs, want) {
				t.Errorf("the log has no %s:\n%s", want, logs)
			}
		}
	})
}
