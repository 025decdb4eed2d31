package httpapi_test

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/docs"
	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/sqlite"
)

// getPaths are the paths served with GET, and so with HEAD (ServeMux
// answers HEAD with the GET handler, discarding the body).
var getPaths = []string{"/plants", "/plants/1", "/events", "/healthz", "/readyz", "/openapi.json", "/openapi.yaml", "/docs", docs.BundlePath, "/"}

// tokenPaths are the GET paths that need a token; getPaths[len(tokenPaths)+1:]
// (after /healthz) are limited per client address.
var tokenPaths = getPaths[:3]

// headLikeGet sends GET, then HEAD, to path with header, and checks that
// HEAD answered as GET did, without a body: the same status and the same
// headers (those that name the request or the moment only present on
// both). It returns the status.
func (e *env) headLikeGet(path string, header map[string]string) int {
	e.t.Helper()
	// The same request both times: Go's client asks for gzip by itself on
	// a GET, not on a HEAD.
	if _, ok := header["Accept-Encoding"]; !ok {
		header = maps.Clone(header)
		if header == nil {
			header = map[string]string{}
		}
		header["Accept-Encoding"] = "identity"
	}
	get, _ := e.do("GET", path, header, nil)
	head, body := e.do("HEAD", path, header, nil)
	if head.StatusCode != get.StatusCode || len(body) != 0 {
		e.t.Errorf("HEAD %s: %d with %d bytes of body; GET answered %d", path, head.StatusCode, len(body), get.StatusCode)
		return head.StatusCode
	}
	for _, name := range []string{"Content-Type", "Content-Encoding", "Cache-Control", "Vary", "ETag", "Link", "WWW-Authenticate", "Content-Security-Policy"} {
		if g, h := get.Header.Values(name), head.Header.Values(name); !slices.Equal(g, h) {
			e.t.Errorf("HEAD %s %d: %s %q, GET's %q", path, head.StatusCode, name, h, g)
		}
	}
	for _, name := range []string{"X-Request-Id", "Retry-After"} {
		if (get.Header.Get(name) == "") != (head.Header.Get(name) == "") {
			e.t.Errorf("HEAD %s %d: %s %q, GET's %q", path, head.StatusCode, name, head.Header.Get(name), get.Header.Get(name))
		}
	}
	return head.StatusCode
}

// HEAD answers as GET on every path GET serves: found, not modified,
// refused and not found alike.
func TestHeadAnswersAsGet(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		e.create(`{"id":1,"name":"Fern","tag":"shade"}`)
		e.create(`{"id":2,"name":"Aloe"}`)
		writeOnly := e.issue("write-only", plantstore.ScopePlantsWrite)
		read := "Bearer " + e.readToken
		for _, path := range getPaths {
			if status := e.headLikeGet(path, map[string]string{"Authorization": read}); status != 200 {
				t.Errorf("HEAD %s: %d, want 200", path, status)
			}
		}
		// A next page's Link, and the documents gzipped as for GET.
		if status := e.headLikeGet("/plants?limit=1&tag=shade", map[string]string{"Authorization": read}); status != 200 {
			t.Errorf("HEAD of a first page: %d", status)
		}
		for _, path := range []string{"/openapi.json", "/openapi.yaml", docs.BundlePath} {
			e.headLikeGet(path, map[string]string{"Accept-Encoding": "gzip"})
		}
		for _, path := range tokenPaths {
			got, _ := e.do("GET", path, map[string]string{"Authorization": read}, nil)
			cases := []struct {
				header map[string]string
				status int
			}{
				{map[string]string{"Authorization": read, "If-None-Match": got.Header.Get("ETag")}, http.StatusNotModified},
				{nil, http.StatusUnauthorized},
				{map[string]string{"Authorization": "Bearer " + plantstore.NewToken()}, http.StatusUnauthorized},
				{map[string]string{"Authorization": "Bearer " + writeOnly}, http.StatusForbidden},
			}
			for _, tc := range cases {
				if status := e.headLikeGet(path, tc.header); status != tc.status {
					t.Errorf("HEAD %s with %v: %d, want %d", path, tc.header, status, tc.status)
				}
			}
		}
		for path, status := range map[string]int{
			"/plants?limit=0":     http.StatusBadRequest,
			"/plants?after=x":     http.StatusBadRequest,
			"/plants/abc":         http.StatusBadRequest,
			"/plants/99999999999": http.StatusNotFound,
			"/events?limit=0":     http.StatusBadRequest,
			"/events?type=x":      http.StatusBadRequest,
		} {
			if got := e.headLikeGet(path, map[string]string{"Authorization": read}); got != status {
				t.Errorf("HEAD %s: %d, want %d", path, got, status)
			}
		}
	})
}

// Header fields over the limit get 431 on HEAD as on GET, on every path.
func TestHeadHeaderLimit(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		for _, path := range getPaths {
			header := map[string]string{"Authorization": "Bearer " + e.readToken, "X-Big": strings.Repeat("h", 64<<10)}
			if status := e.headLikeGet(path, header); status != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("HEAD %s with 64 KiB of header: %d, want 431", path, status)
			}
		}
	})
}

// The limits refuse HEAD as they refuse GET: 429 with Retry-After.
func TestHeadRefusedByLimits(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{cfg: httpapi.Config{TokenRate: 0.01, TokenBurst: 1, AddressRate: 0.01}}) // address bursts of 1
		auth := map[string]string{"Authorization": "Bearer " + e.readToken}
		e.do("GET", "/plants", auth, nil) // the token's burst
		for _, path := range tokenPaths {
			if status := e.headLikeGet(path, auth); status != http.StatusTooManyRequests {
				t.Errorf("HEAD %s past the token's rate: %d, want 429", path, status)
			}
		}
		e.do("GET", "/readyz", nil, nil) // the address's burst
		for _, path := range getPaths[len(tokenPaths)+1:] {
			if status := e.headLikeGet(path, nil); status != http.StatusTooManyRequests {
				t.Errorf("HEAD %s past the address's rate: %d, want 429", path, status)
			}
		}
		if status := e.headLikeGet("/healthz", nil); status != 200 {
			t.Errorf("HEAD /healthz from a limited address: %d", status)
		}
	})
}

// A failing store fails HEAD as it fails GET: 500 for a bug, 503 with
// Retry-After when it does not answer in time or at all.
func TestHeadWhenTheStoreFails(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		auth := func(e *env) map[string]string { return map[string]string{"Authorization": "Bearer " + e.readToken} }
		buggy := start(t, options{wrap: func(s plantstore.Store) plantstore.Store { return panickingStore{s} }})
		for _, path := range tokenPaths {
			if status := buggy.headLikeGet(path, auth(buggy)); status != http.StatusInternalServerError {
				t.Errorf("HEAD %s on a panicking store: %d, want 500", path, status)
			}
		}
		stalled := start(t, options{
			sqlite: sqlite.Options{BusyTimeout: time.Minute},
			cfg:    httpapi.Config{RequestTimeout: 300 * time.Millisecond},
			wrap:   func(s plantstore.Store) plantstore.Store { return stallingReads{s} },
		})
		for _, path := range tokenPaths {
			if status := stalled.headLikeGet(path, auth(stalled)); status != http.StatusServiceUnavailable {
				t.Errorf("HEAD %s on a stalled store: %d, want 503", path, status)
			}
		}
		gone := start(t, options{})
		gone.db.Close()
		if status := gone.headLikeGet("/readyz", nil); status != http.StatusServiceUnavailable {
			t.Errorf("HEAD /readyz with the store gone: %d, want 503", status)
		}
	})
}

// HEAD of a stream answers the status and headers the stream would begin
// with, and ends: it does not stay open. Refusals are as for GET.
func TestHeadOfAStream(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		stream := map[string]string{"Authorization": "Bearer " + e.readToken, "Accept": "text/event-stream"}
		resp, body := e.do("HEAD", "/events", stream, nil)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || len(body) != 0 {
			t.Errorf("HEAD of a stream: %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
		stream["Last-Event-ID"] = "x"
		if resp, _ := e.do("HEAD", "/events", stream, nil); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("HEAD of a stream with a bad Last-Event-ID: %d, want 400", resp.StatusCode)
		}
	})
}
