package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/auth"
	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/sqlite"
)

const plantJSON = `{"id":50,"name":"Orchid"}`

func TestAuthentication(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{authTTL: 50 * time.Millisecond})
		revoked := e.issue("gone", plantstore.KnownScopes...)
		if err := e.db.RevokeToken(context.Background(), "gone", time.Now()); err != nil {
			t.Fatal(err)
		}
		const noError = `Bearer realm="plantstore"`
		cases := []struct {
			name, authorization string
			status              int
			challenge           string // the WWW-Authenticate value, or a prefix ending in ", "
		}{
			{"no credentials", "", 401, noError},
			{"basic scheme", "Basic dXNlcjpwYXNz", 401, noError},
			{"token without scheme", e.writeToken, 401, noError},
			{"empty bearer", "Bearer", 401, noError + `, error="invalid_token", `},
			{"blank bearer", "Bearer    ", 401, noError + `, error="invalid_token", `},
			{"malformed token", "Bearer not-a-token", 401, noError + `, error="invalid_token", `},
			{"bad checksum", "Bearer " + otherLastChar(e.writeToken), 401, noError + `, error="invalid_token", `},
			{"two tokens", "Bearer " + e.writeToken + " " + e.writeToken, 401, noError + `, error="invalid_token", `},
			{"unknown token", "Bearer " + plantstore.NewToken(), 401, noError + `, error="invalid_token", `},
			{"revoked token", "Bearer " + revoked, 401, noError + `, error="invalid_token", `},
			{"read-only token", "Bearer " + e.readToken, 403, noError + `, error="insufficient_scope", `},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				resp, body := e.do("POST", "/plants", map[string]string{
					"Authorization": tc.authorization, "Content-Type": "application/json",
				}, strings.NewReader(plantJSON))
				wantError(t, resp, body, tc.status)
				got := resp.Header.Get("WWW-Authenticate")
				if strings.HasSuffix(tc.challenge, ", ") {
					if !strings.HasPrefix(got, tc.challenge) || !strings.Contains(got, `error_description="`) {
						t.Errorf("WWW-Authenticate %q, want %q...", got, tc.challenge)
					}
				} else if got != tc.challenge {
					t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
				}
				if tc.status == 403 && !strings.Contains(got, `scope="plants:write"`) {
					t.Errorf("403 challenge %q names no scope", got)
				}
				if _, ok := e.stored(50); ok {
					t.Fatal("plant stored without a valid token")
				}
			})
		}
	})
}

// otherLastChar is token with its last character changed, so that its
// checksum no longer holds: to 'x', or to 'y' when it is 'x' (a token
// ending in 'x', one in 62, would otherwise stay valid).
func otherLastChar(token string) string {
	last := byte('x')
	if token[len(token)-1] == last {
		last = 'y'
	}
	return token[:len(token)-1] + string(last)
}

func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		resp, body := e.raw("POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.writeToken +
			"\r\nAuthorization: Bearer " + e.writeToken + "\r\nContent-Type: application/json\r\nContent-Length: 19\r\n\r\n{\"id\":1,\"name\":\"a\"}")
		wantError(t, resp, body, 401, "exactly one Authorization")
		if got := resp.Header.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) {
			t.Errorf("WWW-Authenticate %q", got)
		}
		if _, ok := e.stored(1); ok {
			t.Error("stored with two Authorization headers")
		}
	})
}

// A tab where the space goes is refused, and the message says why
// rather than calling the scheme wrong.
func TestTabAfterBearerIsNamed(t *testing.T) {
	e := start(t, options{})
	resp, body := e.do("POST", "/plants", map[string]string{
		"Authorization": "Bearer\t" + e.writeToken, "Content-Type": "application/json",
	}, strings.NewReader(plantJSON))
	wantError(t, resp, body, 401, "with a space, not a tab")
	if _, ok := e.stored(50); ok {
		t.Error("stored with a tab after Bearer")
	}
}

func TestSchemeIsCaseInsensitive(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		for i, scheme := range []string{"bearer", "BEARER", "BeArEr"} {
			resp, body := e.do("POST", "/plants", map[string]string{
				"Authorization": scheme + " " + e.writeToken, "Content-Type": "application/json",
			}, strings.NewReader(`{"id":`+string(rune('1'+i))+`,"name":"x"}`))
			if resp.StatusCode != 200 {
				t.Errorf("scheme %q: %d %s", scheme, resp.StatusCode, body)
			}
		}
	})
}

// Authentication comes first: a client without a token learns nothing
// about the body it sent.
func TestAuthenticationBeforeBodyChecks(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		resp, body := e.do("POST", "/plants", map[string]string{"Content-Type": "text/plain"}, strings.NewReader("junk"))
		wantError(t, resp, body, 401)
	})
}

func TestRevocationWhileServing(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{authTTL: 200 * time.Millisecond})
		secret := e.issue("short-lived", plantstore.KnownScopes...)
		post := func() int {
			resp, _ := e.do("POST", "/plants", map[string]string{
				"Authorization": "Bearer " + secret, "Content-Type": "application/json",
			}, strings.NewReader(`{"id":1,"name":"x"}`))
			return resp.StatusCode
		}
		if s := post(); s != 200 {
			t.Fatalf("fresh token: %d", s)
		}
		if err := e.db.RevokeToken(context.Background(), "short-lived", time.Now()); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for post() != 401 {
			if time.Now().After(deadline) {
				t.Fatal("revoked token still accepted after 5 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func TestTokenNeverLogged(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		e.create(`{"id":1,"name":"x"}`)
		e.do("POST", "/plants", map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
		logs := e.logs.String()
		if strings.Contains(logs, e.writeToken) || strings.Contains(logs, e.readToken) || strings.Contains(logs, plantstore.TokenPrefix) {
			t.Errorf("a token appears in the log:\n%s", logs)
		}
		if !strings.Contains(logs, `"token":"writer"`) {
			t.Errorf("the access log does not name the token:\n%s", logs)
		}
	})
}

func TestAccessLogAndRequestID(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		resp, _ := e.do("GET", "/healthz", map[string]string{"X-Request-Id": "trace-abc.123"}, nil)
		if got := resp.Header.Get("X-Request-Id"); got != "trace-abc.123" {
			t.Errorf("X-Request-Id %q, want the caller's", got)
		}
		resp, _ = e.do("GET", "/healthz", map[string]string{"X-Request-Id": strings.Repeat("x", 200)}, nil)
		generated := resp.Header.Get("X-Request-Id")
		if generated == "" || len(generated) > 128 {
			t.Errorf("an over-long X-Request-Id was kept or none made: %q", generated)
		}
		e.do("GET", "/nowhere", nil, nil)
		logs := e.logs.String()
		for _, want := range []string{`"request_id":"trace-abc.123"`, `"request_id":"` + generated + `"`,
			`"path":"/nowhere","status":404`, `"method":"GET"`, `"duration_ms":`} {
			if !strings.Contains(logs, want) {
				t.Errorf("the access log lacks %s:\n%s", want, logs)
			}
		}
	})
}

func TestHealthEndpointsNeedNoToken(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		for _, path := range []string{"/healthz", "/readyz", "/openapi.json", "/openapi.yaml"} {
			resp, body := e.do("GET", path, nil, nil)
			if resp.StatusCode != http.StatusOK || len(body) == 0 {
				t.Errorf("GET %s: %d %q", path, resp.StatusCode, body)
			}
		}
	})
}

// A token lookup waiting for another from its address (the throttle lets
// no more run than the attempts left) that runs out of its request's
// time is answered 503 with an Error, not held or left without a body.
func TestThrottledLookupOutOfTimeIs503(t *testing.T) {
	var lookups atomic.Int64
	entered, release := make(chan struct{}, 1), make(chan struct{})
	e := start(t, options{
		// One attempt: one lookup in flight from an address at a time.
		cfg: httpapi.Config{AuthFailures: 1, AuthFailureWindow: time.Minute, RequestTimeout: 300 * time.Millisecond},
		wrap: func(s plantstore.Store) plantstore.Store {
			return heldLookups{Store: s, n: &lookups, entered: entered, release: release}
		},
	})
	// Released in any case, so a broken server fails the test, not hangs it.
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	defer releaseAll()
	time.AfterFunc(5*time.Second, releaseAll)

	guess := func() *http.Request {
		req, err := http.NewRequest("GET", e.url+"/plants/1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+plantstore.NewToken())
		return req
	}
	first := make(chan error, 1)
	go func() {
		resp, err := e.client.Do(guess())
		if err == nil {
			resp.Body.Close()
		}
		first <- err
	}()
	<-entered // the first guess holds the address's one place

	begin := time.Now()
	resp, err := e.client.Do(guess())
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 3*time.Second {
		t.Errorf("the waiting lookup was answered after %v, not at its request timeout", took)
	}
	var body errorBody
	decodeErr := json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the waiting lookup: %d %+v, want 503", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if decodeErr != nil || body.Error != http.StatusServiceUnavailable || !strings.Contains(body.Message, "in time") {
		t.Errorf("body %+v (%v), want error 503 and a message saying the time ran out", body, decodeErr)
	}
	if n := lookups.Load(); n != 1 {
		t.Errorf("%d lookups reached the store, want the first guess's only", n)
	}
	releaseAll()
	if err := <-first; err != nil {
		t.Errorf("the first guess: %v", err)
	}
}

// heldLookups holds every token lookup until release is closed, telling
// entered of the first.
type heldLookups struct {
	plantstore.Store
	n       *atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func (s heldLookups) TokenByHash(ctx context.Context, hash plantstore.TokenHash) (plantstore.Token, error) {
	s.n.Add(1)
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return s.Store.TokenByHash(ctx, hash)
}

// A request hashes its token once, whatever the cache and the
// failed-authentication throttle ask of it: on a hit; on a miss, which
// asks the cache, whether the token is known, then the store; on a miss
// of a token known but stale; on a guess; on a malformed token. Only
// Hash and Authenticate take the secret (the rest take its hash), so
// counting their calls counts the hashing.
func TestOneHashPerRequest(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "a.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	secret := plantstore.NewToken()
	if _, err := db.CreateToken(ctx, plantstore.Token{Name: "t", Scopes: plantstore.KnownScopes}, plantstore.HashToken(secret)); err != nil {
		t.Fatal(err)
	}
	var later atomic.Int64 // how far the authenticator's clock is ahead
	authn := hashCounting{hashes: new(atomic.Int64), Authenticator: auth.New(db, auth.Options{
		CacheTTL: time.Minute,
		Now:      func() time.Time { return time.Now().Add(time.Duration(later.Load())) },
	})}
	srv := httptest.NewServer(httpapi.NewServer(db, authn, httpapi.Config{AuthFailures: 10}))
	defer srv.Close()
	client := apitest.Client(t)

	for _, c := range []struct {
		name, token string
		status      int
		lookup      bool // asks the store
		before      func()
	}{
		{"a miss", secret, 200, true, nil},
		{"a hit", secret, 200, false, nil},
		{"a miss of a known token", secret, 200, true, func() { later.Add(int64(2 * time.Minute)) }},
		{"a guess", plantstore.NewToken(), 401, true, nil},
		{"a malformed token", "pst_guess", 401, false, nil},
	} {
		if c.before != nil {
			c.before()
		}
		req, err := http.NewRequest("GET", srv.URL+"/plants", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		hashes, misses := authn.hashes.Load(), authn.Stats().Misses
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Fatalf("%s: %d, want %d", c.name, resp.StatusCode, c.status)
		}
		if n := authn.hashes.Load() - hashes; n != 1 {
			t.Errorf("%s: the token was hashed %d times, want once", c.name, n)
		}
		if looked := authn.Stats().Misses > misses; looked != c.lookup {
			t.Errorf("%s: looked up in the store: %v, want %v", c.name, looked, c.lookup)
		}
	}
}

// hashCounting counts the calls that hash a token's secret.
type hashCounting struct {
	*auth.Authenticator
	hashes *atomic.Int64
}

func (a hashCounting) Hash(secret string) plantstore.TokenHash {
	a.hashes.Add(1)
	return a.Authenticator.Hash(secret)
}

func (a hashCounting) Authenticate(ctx context.Context, secret string) (plantstore.Token, error) {
	a.hashes.Add(1)
	return a.Authenticator.Authenticate(ctx, secret)
}

// A token found valid before and refused on its next lookup (revoked
// since) counts against its client's address like a guess, though, being
// known, its lookup took no place among the address's lookups.
func TestRevokedKnownTokenCountsAgainstItsAddress(t *testing.T) {
	e := start(t, options{
		cfg:     httpapi.Config{AuthFailures: 1, AuthFailureWindow: time.Minute},
		authTTL: 50 * time.Millisecond,
	})
	secret := e.issue("revoked-later", plantstore.KnownScopes...)
	get := func(token string) (*http.Response, []byte) {
		return e.do("GET", "/plants", map[string]string{"Authorization": "Bearer " + token}, nil)
	}
	if resp, body := get(secret); resp.StatusCode != 200 {
		t.Fatalf("the token before its revocation: %d %s", resp.StatusCode, body)
	}
	if err := e.db.RevokeToken(context.Background(), "revoked-later", time.Now()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // known still, no longer cached
	resp, body := get(secret)
	wantError(t, resp, body, 401)
	resp, body = get(plantstore.NewToken())
	wantRetryAfter(t, resp, body, http.StatusTooManyRequests, "failed authentications")
}
