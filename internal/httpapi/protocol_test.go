package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore/api"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/docs"
	"github.com/plantstore/plantstore/internal/httpapi"
)

func TestUnknownPathsAndMethods(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		auth := map[string]string{"Authorization": "Bearer " + e.writeToken}
		for _, path := range []string{"/nowhere", "/plants/1/leaves", "/plants/", "/PLANTS"} {
			resp, body := e.do("GET", path, auth, nil)
			wantError(t, resp, body, 404)
		}
		// The path as sent: /plants%2F1 is not /plants/1, which exists.
		e.create(`{"id":1,"name":"a"}`)
		resp, body := e.raw("GET /plants%2F1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.writeToken + "\r\n\r\n")
		wantError(t, resp, body, 404, "there is no resource at /plants%2F1")
		for _, tc := range []struct{ method, path, allow string }{
			{"PUT", "/plants", "GET, HEAD, POST"},
			{"DELETE", "/plants", "GET, HEAD, POST"},
			{"PATCH", "/plants", "GET, HEAD, POST"},
			{"POST", "/plants/1", "DELETE, GET, HEAD, PUT"},
			{"PATCH", "/plants/1", "DELETE, GET, HEAD, PUT"},
			{"POST", "/healthz", "GET, HEAD"},
		} {
			resp, body := e.do(tc.method, tc.path, auth, nil)
			wantError(t, resp, body, 405, tc.method)
			if got := resp.Header.Get("Allow"); got != tc.allow {
				t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
			}
		}
		// A target without a path (CONNECT's authority form) is named as
		// sent.
		resp, body = e.raw("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
		wantError(t, resp, body, 405, "method CONNECT is not allowed on example.com:443;")
	})
}

// A path that is not in canonical form gets 307 to the canonical one, its
// query kept, whether its dot segments are written plainly or escaped
// (RFC 3986, section 6.2.2.2: "%2e" is "."); other escapes are matched
// decoded, as ever, and kept as they came in the Location, not escaped
// again ("%31" is not "%2531"), so following it reaches the resource.
func TestNonCanonicalPathsRedirect(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		for target, want := range map[string]string{
			"//plants":                      "/plants",
			"/./plants":                     "/plants",
			"/%2e/plants":                   "/plants",
			"/%2E/plants":                   "/plants",
			"/plants/%2E%2e/plants?limit=5": "/plants?limit=5",
			"/%2e%2e/plants/1":              "/plants/1",
			"/plants/.%2e/healthz":          "/healthz",
			"//plants/%31":                  "/plants/%31",
			"/plants//%31":                  "/plants/%31",
			"/./plants/%31?x=%2F":           "/plants/%31?x=%2F",
			"//plants/1%2F":                 "/plants/1%2F",
			"//plants/%20":                  "/plants/%20",
			"/plants/%2e%2e/plants/%2D5":    "/plants/%2D5",
			"//plants/":                     "/plants/",
		} {
			resp, body := e.raw("GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			wantError(t, resp, body, http.StatusTemporaryRedirect, "canonical")
			if got := resp.Header.Get("Location"); got != want {
				t.Errorf("GET %s: Location %q, want %q", target, got, want)
			}
		}
		resp, body := e.raw("GET /plants%2e HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		wantError(t, resp, body, http.StatusNotFound)
		// Followed, the Location names the plant the path named.
		e.create(`{"id":1,"name":"Fern"}`)
		resp, body = e.raw("GET //plants/%31 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		wantError(t, resp, body, http.StatusTemporaryRedirect, "canonical")
		resp, body = e.do("GET", resp.Header.Get("Location"), map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
		if resp.StatusCode != 200 || !strings.Contains(string(body), "Fern") {
			t.Errorf("GET the Location of //plants/%%31: %d %s", resp.StatusCode, body)
		}
		// Canonical paths with escapes are served, not redirected.
		resp, body = e.do("GET", "/plants/%31", map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
		if resp.StatusCode != 200 {
			t.Errorf("GET /plants/%%31: %d %s", resp.StatusCode, body)
		}
	})
}

// A body can begin any write to the connection; none can pass for one of
// net/http's own answers and be rewritten.
func TestBodiesCannotForgeProtocolErrors(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		for i, name := range []string{"HTTP/1.1 417 boom", "HTTP/1.1 400 Bad Request"} {
			e.create(fmt.Sprintf(`{"id":%d,"name":%q}`, i, name))
		}
		// Pad earlier plants so the forged name falls at the start of each
		// 4096-byte write of a listing, whatever the prefix before it.
		for pad := range 64 {
			id := 100 + pad
			e.create(fmt.Sprintf(`{"id":%d,"name":%q}`, id, strings.Repeat("x", 1+pad)))
		}
		resp, body := e.do("GET", "/plants?limit=1000", map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
		if resp.StatusCode != 200 || !strings.Contains(string(body), "HTTP/1.1 417 boom") || !strings.HasSuffix(string(body), "]") {
			t.Errorf("listing: %d, %d bytes, ends %q", resp.StatusCode, len(body), body[max(0, len(body)-40):])
		}
	})
}

func TestOpenAPIServed(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		// The documents name where they were fetched from as their server,
		// and are the embedded ones otherwise.
		resp, body := e.do("GET", "/openapi.json", nil, nil)
		var doc map[string]any
		if resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &doc) != nil {
			t.Fatalf("/openapi.json: %q, %d bytes", resp.Header.Get("Content-Type"), len(body))
		}
		if servers, _ := doc["servers"].([]any); len(servers) != 1 || servers[0].(map[string]any)["url"] != e.url {
			t.Errorf("/openapi.json's servers %v, want %s", doc["servers"], e.url)
		}
		var embedded map[string]any
		json.Unmarshal(api.JSON, &embedded)
		delete(doc, "servers")
		delete(embedded, "servers")
		if !reflect.DeepEqual(doc, embedded) {
			t.Error("/openapi.json differs from the embedded document beyond its servers")
		}
		resp, body = e.do("GET", "/openapi.yaml", nil, nil)
		if resp.Header.Get("Content-Type") != "application/yaml" || !bytes.Contains(body, []byte("servers:\n  - url: \""+e.url+"\"")) {
			t.Errorf("/openapi.yaml: %q, %d bytes, servers not %s", resp.Header.Get("Content-Type"), len(body), e.url)
		}
		// Gzipped to a client that takes it.
		resp, gz := e.do("GET", "/openapi.json", map[string]string{"Accept-Encoding": "gzip"}, nil)
		if resp.Header.Get("Content-Encoding") != "gzip" || !slices.Contains(resp.Header.Values("Vary"), "Accept-Encoding") || len(gz) >= len(body)/2 {
			t.Errorf("/openapi.json to a gzip client: Content-Encoding %q, Vary %q, %d bytes", resp.Header.Get("Content-Encoding"), resp.Header.Values("Vary"), len(gz))
		}
		// Conditional requests (RFC 9110, section 13): a strong tag a
		// coding, either naming the document.
		plain, _ := e.do("GET", "/openapi.json", map[string]string{"Accept-Encoding": "identity"}, nil)
		tag, gzTag := plain.Header.Get("ETag"), resp.Header.Get("ETag")
		if !strongETag.MatchString(tag) || gzTag != strings.TrimSuffix(tag, `"`)+`-gz"` {
			t.Errorf("/openapi.json's ETags: %q and, gzipped, %q", tag, gzTag)
		}
		for _, inm := range []string{tag, gzTag, "W/" + tag, `"x", ` + tag} {
			resp, body := e.do("GET", "/openapi.json", map[string]string{"If-None-Match": inm, "Accept-Encoding": "identity"}, nil)
			if resp.StatusCode != http.StatusNotModified || len(body) != 0 || resp.Header.Get("ETag") != tag || resp.Header.Get("Cache-Control") == "" {
				t.Errorf("/openapi.json with If-None-Match %s: %d, ETag %q, %d bytes; want 304 with the ETag", inm, resp.StatusCode, resp.Header.Get("ETag"), len(body))
			}
		}
		if resp, _ := e.do("GET", "/openapi.yaml", map[string]string{"If-None-Match": tag}, nil); resp.StatusCode != 200 {
			t.Errorf("/openapi.yaml with the JSON document's ETag: %d, want 200", resp.StatusCode)
		}
		resp, body = e.do("GET", "/openapi.json", map[string]string{"If-Match": `"stale"`}, nil)
		wantError(t, resp, body, http.StatusPreconditionFailed, "If-Match")
		if resp, _ := e.do("GET", "/openapi.json", map[string]string{"If-Match": tag}, nil); resp.StatusCode != 200 {
			t.Errorf("/openapi.json with If-Match its ETag: %d, want 200", resp.StatusCode)
		}
		// Both documents, by GET and by HEAD alike.
		for _, path := range []string{"/openapi.json", "/openapi.yaml"} {
			current := e.headLikeGet(path, nil)
			got, _ := e.do("HEAD", path, map[string]string{"Accept-Encoding": "identity"}, nil)
			if current != 200 || got.Header.Get("ETag") == "" {
				t.Fatalf("HEAD %s: %d, ETag %q", path, current, got.Header.Get("ETag"))
			}
			if status := e.headLikeGet(path, map[string]string{"If-None-Match": got.Header.Get("ETag"), "Accept-Encoding": "identity"}); status != http.StatusNotModified {
				t.Errorf("%s with If-None-Match its ETag: %d, want 304", path, status)
			}
			if status := e.headLikeGet(path, map[string]string{"If-Match": `"stale"`}); status != http.StatusPreconditionFailed {
				t.Errorf("%s with a stale If-Match: %d, want 412", path, status)
			}
		}
		// The reference page, and the script it loads, are served without a
		// token; the page is read by a browser in cmd/plantstore's tests.
		resp, body = e.do("GET", "/docs", nil, nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !bytes.Contains(body, []byte(`spec-url="openapi.json"`)) {
			t.Errorf("/docs: %d %q:\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		resp, body = e.do("GET", docs.BundlePath, nil, nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") || len(body) < 1<<20 {
			t.Errorf("%s: %d %q, %d bytes", docs.BundlePath, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
	})
}

func TestUnsupportedMediaType(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		for _, tc := range []struct{ contentType, encoding string }{
			{"", ""},
			{"text/plain", ""},
			{"application/x-www-form-urlencoded", ""},
			{"application/xml", ""},
			{"application/jsonx", ""},
			{"application/merge-patch+json", ""},
			{"application/json; charset=iso-8859-1", ""},
			{"application/json;;", ""},
			{"application/json", "gzip"},
		} {
			resp, body := e.do("POST", "/plants", map[string]string{
				"Authorization": "Bearer " + e.writeToken, "Content-Type": tc.contentType, "Content-Encoding": tc.encoding,
			}, strings.NewReader(`{"id":60,"name":"a"}`))
			wantError(t, resp, body, 415)
			if _, ok := e.stored(60); ok {
				t.Fatalf("Content-Type %q stored a plant", tc.contentType)
			}
			// A coding refused names the codings taken (RFC 9110, section 15.5.16).
			if got := resp.Header.Get("Accept-Encoding"); (tc.encoding != "") != (got == "identity") {
				t.Errorf("Content-Encoding %q: 415 with Accept-Encoding %q", tc.encoding, got)
			}
		}
		resp, body := e.raw("POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.writeToken +
			"\r\nContent-Type: application/json\r\nContent-Type: text/plain\r\nContent-Length: 20\r\n\r\n{\"id\":60,\"name\":\"a\"}")
		wantError(t, resp, body, 415, "one Content-Type")
		for i, ct := range []string{"application/json; charset=utf-8", "application/json;charset=UTF-8", "Application/JSON", "application/json; charset=utf8", "application/json;charset=UTF8"} {
			resp, body := e.do("POST", "/plants", map[string]string{
				"Authorization": "Bearer " + e.writeToken, "Content-Type": ct,
			}, strings.NewReader(fmt.Sprintf(`{"id":%d,"name":"a"}`, 70+i)))
			if resp.StatusCode != 200 {
				t.Errorf("Content-Type %q: %d %s", ct, resp.StatusCode, body)
			}
		}
		// "identity" is no coding at all (RFC 9110, section 12.5.3).
		resp, body = e.do("POST", "/plants", map[string]string{
			"Authorization": "Bearer " + e.writeToken, "Content-Type": "application/json", "Content-Encoding": "identity",
		}, strings.NewReader(`{"id":64,"name":"a"}`))
		if resp.StatusCode != 200 {
			t.Errorf("Content-Encoding identity: %d %s", resp.StatusCode, body)
		}
		// The field is a list, and its lines are one list (RFC 9110,
		// sections 5.3 and 8.4): judged by every member, on every line.
		for i, ce := range []string{"identity, identity", "IDENTITY ,identity,"} {
			resp, body := e.do("POST", "/plants", map[string]string{
				"Authorization": "Bearer " + e.writeToken, "Content-Type": "application/json", "Content-Encoding": ce,
			}, strings.NewReader(fmt.Sprintf(`{"id":%d,"name":"a"}`, 80+i)))
			if resp.StatusCode != 200 {
				t.Errorf("Content-Encoding %q: %d %s", ce, resp.StatusCode, body)
			}
		}
		for _, lines := range []string{"identity, gzip", "identity\r\nContent-Encoding: gzip"} {
			resp, body := e.raw("POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.writeToken +
				"\r\nContent-Type: application/json\r\nContent-Encoding: " + lines + "\r\nContent-Length: 20\r\n\r\n{\"id\":61,\"name\":\"a\"}")
			wantError(t, resp, body, 415, `Content-Encoding "gzip"`)
			if resp.Header.Get("Accept-Encoding") != "identity" {
				t.Errorf("Content-Encoding %q: 415 with Accept-Encoding %q", lines, resp.Header.Get("Accept-Encoding"))
			}
			if _, ok := e.stored(61); ok {
				t.Fatalf("Content-Encoding %q stored a plant", lines)
			}
		}
	})
}

func TestBodyLimit(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		const limit = 64 << 10
		e := start(t, options{})
		pad := func(size int) string {
			head := `{"id":70,"name":"big","pad":"`
			return head + strings.Repeat("x", size-len(head)-2) + `"}`
		}
		if resp, body := e.create(pad(limit)); resp.StatusCode != 200 {
			t.Fatalf("a body of exactly the limit: %d %s", resp.StatusCode, body)
		}
		resp, body := e.create(strings.Replace(pad(limit+1), `"id":70`, `"id":71`, 1))
		wantError(t, resp, body, 413, "65536")
		// Without a Content-Length (chunked), the limit holds while reading.
		chunked := io.MultiReader(strings.NewReader(strings.Replace(pad(limit+100), `"id":70`, `"id":72`, 1)))
		resp, body = e.do("POST", "/plants", map[string]string{
			"Authorization": "Bearer " + e.writeToken, "Content-Type": "application/json",
		}, chunked)
		wantError(t, resp, body, 413)
		if _, ok := e.stored(71); ok {
			t.Error("an oversized body was stored")
		}
		if _, ok := e.stored(72); ok {
			t.Error("an oversized chunked body was stored")
		}

		small := start(t, options{cfg: httpapi.Config{MaxBodyBytes: 100}})
		resp, body = small.create(`{"id":1,"name":"` + strings.Repeat("a", 100) + `"}`)
		wantError(t, resp, body, 413, "100 bytes")
	})
}

func TestHeaderLimit(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		resp, body := e.do("GET", "/healthz", map[string]string{"X-Big": strings.Repeat("a", 64<<10)}, nil)
		wantError(t, resp, body, http.StatusRequestHeaderFieldsTooLarge)
		resp, body = e.do("POST", "/plants", map[string]string{
			"Authorization": "Bearer " + e.writeToken, "Content-Type": "application/json",
			"X-Big": strings.Repeat("a", 64<<10),
		}, strings.NewReader(`{"id":90,"name":"a"}`))
		wantError(t, resp, body, http.StatusRequestHeaderFieldsTooLarge, "header")
		if _, ok := e.stored(90); ok {
			t.Error("a request with oversized headers stored a plant")
		}
	})
}

func TestMalformedHTTPGetsErrorBody(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		// On a plant route too, which the fast path (internal/http1)
		// reads first and hands to net/http.
		for _, path := range []string{"/healthz", "/plants/1"} {
			for _, req := range []string{
				"GET " + path + " HTTP/1.1\r\nHost: x\r\nthis is not a header\r\n\r\n",
				"GET " + path + " HTTP/1.1\r\n\r\n", // no Host
				"GET " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
			} {
				resp, body := e.raw(req)
				wantError(t, resp, body, 400, "malformed HTTP request")
			}
		}
		// A head longer than the fast path's buffer is answered as any.
		resp, body := e.raw("GET /plants/1 HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", 5000) + "\r\n\r\n")
		wantError(t, resp, body, http.StatusUnauthorized)
		resp, body = e.raw("POST /plants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
		wantError(t, resp, body, http.StatusNotImplemented)
		resp, body = e.raw("GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n")
		wantError(t, resp, body, http.StatusExpectationFailed, "100-continue")
		resp, body = e.raw("POST /plants HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
		wantError(t, resp, body, http.StatusExpectationFailed)
		if n := strings.Count(e.logs.String(), "rejected before routing"); n != 9 {
			t.Errorf("%d protocol rejections logged, want 9:\n%s", n, e.logs)
		}
		// A chunk extension past Go's bound for a chunk's size line.
		resp, body = e.raw("POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.writeToken +
			"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n17;" + strings.Repeat("e", 10000) +
			"\r\n{\"id\":700,\"name\":\"tr\"}\r\n0\r\n\r\n")
		wantError(t, resp, body, http.StatusBadRequest, "a chunk's size line is too long")
		// HTTP/2's preface, which Go's server passes to the handler.
		resp, body = e.raw("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
		wantError(t, resp, body, http.StatusHTTPVersionNotSupported, "HTTP/1.1")
		if !resp.Close {
			t.Error("the connection stays open after HTTP/2's preface")
		}
		// The client's protocol is no fault of the service: no error logged.
		if logs := e.logs.String(); strings.Contains(logs, `"level":"ERROR"`) {
			t.Errorf("a refused protocol is logged as an error:\n%s", logs)
		}
		// (OPTIONS *: TestOptionsAsterisk.)
	})
}

// OPTIONS * asks what the server can do in general (RFC 9110, section
// 9.3.7): it gets 200, an empty body and the API's methods in Allow,
// without a token, as a CORS preflight does, over HTTP/1.1 (the connection
// then serves the next request) and HTTP/1.0, with CORS on or off, and it
// is logged like any request. Any other method on "*" still gets 400 with
// the Error body. The lean server (internal/http1) never takes a target
// that is not a path, so net/http answers each of them, through the API's
// handler.
func TestOptionsAsterisk(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		for _, cors := range []bool{false, true} {
			var cfg httpapi.Config
			origin := ""
			if cors {
				cfg.CORSOrigins = []string{"http://app.example"}
				origin = "Origin: http://app.example\r\n"
			}
			e := start(t, options{cfg: cfg})
			for _, tc := range []struct {
				name, request string
				keepAlive     bool
			}{
				{"HTTP/1.1", "OPTIONS * HTTP/1.1\r\nHost: x\r\n" + origin + "\r\n", true},
				// A body is left unread, and the connection closed, as
				// after any answer that takes none (recorder.refuseBody).
				{"HTTP/1.1 with a body", "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc", false},
				{"HTTP/1.1 with a wrong token", "OPTIONS * HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nonsense\r\n\r\n", true},
				{"HTTP/1.0", "OPTIONS * HTTP/1.0\r\n" + origin + "\r\n", false},
			} {
				conn, br := dialRaw(t, e.addr)
				// Then /healthz on the same connection, pipelined, if it
				// stays open.
				io.WriteString(conn, tc.request+"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("%s (CORS %v): %v", tc.name, cors, err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.ContentLength != 0 || resp.Header.Get("Content-Length") != "0" {
					t.Errorf("%s (CORS %v): %d, Content-Length %q, body %q; want 200, 0 and none",
						tc.name, cors, resp.StatusCode, resp.Header.Get("Content-Length"), body)
				}
				if got := resp.Header.Get("Allow"); got != "GET, HEAD, POST, PUT, DELETE" {
					t.Errorf("%s (CORS %v): Allow %q", tc.name, cors, got)
				}
				if resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("Access-Control-Allow-Origin") != "" {
					t.Errorf("%s (CORS %v): headers %v", tc.name, cors, resp.Header)
				}
				if resp.Close == tc.keepAlive {
					t.Errorf("%s (CORS %v): the connection closes: %v, want %v", tc.name, cors, resp.Close, !tc.keepAlive)
				}
				if tc.keepAlive {
					next, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("%s: no answer to the request after it: %v", tc.name, err)
					}
					req, _ := http.NewRequest("GET", "http://"+e.addr+"/healthz", nil)
					apitest.CheckRaw(t, req, next)
					if next.StatusCode != http.StatusOK {
						t.Errorf("%s: the request after it got %d", tc.name, next.StatusCode)
					}
				}
				conn.Close()
			}
			if n := strings.Count(e.logs.String(), `"method":"OPTIONS","path":"*","status":200`); n != 4 {
				t.Errorf("%d access log lines for OPTIONS *, want 4:\n%s", n, e.logs)
			}
		}
		e := start(t, options{})
		for _, method := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"} {
			conn, br := dialRaw(t, e.addr)
			io.WriteString(conn, method+" * HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+e.writeToken+"\r\n\r\n")
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				t.Fatalf("%s *: %v", method, err)
			}
			body, _ := io.ReadAll(resp.Body)
			conn.Close()
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s *: %d %q, want 400 with the Error body", method, resp.StatusCode, resp.Header.Get("Content-Type"))
				continue
			}
			if method != "HEAD" {
				wantError(t, resp, body, http.StatusBadRequest, `the request target "*" is not a path`)
			}
		}
	})
}

// dialRaw connects to addr for a test that writes raw requests and reads
// their answers, unchecked by the contract (which has no "*").
func dialRaw(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn, bufio.NewReader(conn)
}

// A client that sends its headers slowly is cut off at the read-header
// timeout, answered or not.
func TestSlowlorisCutOff(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{limits: httpapi.ServerLimits{ReadHeaderTimeout: 300 * time.Millisecond}})
		conn, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		begin := time.Now()
		io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		closed := make(chan struct{})
		go func() {
			io.Copy(io.Discard, conn)
			close(closed)
		}()
		for i := 0; ; i++ {
			select {
			case <-closed:
				if took := time.Since(begin); took > 2*time.Second {
					t.Errorf("cut off after %v", took)
				}
				return
			case <-time.After(100 * time.Millisecond):
				if i > 50 {
					t.Fatal("a slowloris client held its connection for 5 s")
				}
				fmt.Fprintf(conn, "X-Slow-%d: a\r\n", i)
			}
		}
	})
}

// A body that arrives too slowly gets 408 once the read timeout passes.
func TestSlowBodyTimesOut(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		// The write timeout ends with the read timeout, as with the defaults.
		e := start(t, options{limits: httpapi.ServerLimits{ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond}})
		e.create(`{"id":81,"name":"before"}`)
		for _, start := range []string{"POST /plants", "PUT /plants/81"} {
			conn, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			request := start + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.writeToken +
				"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":80,"
			io.WriteString(conn, request)
			resp, body := readRaw(t, conn, request)
			wantError(t, resp, body, http.StatusRequestTimeout)
		}
		if _, ok := e.stored(80); ok {
			t.Error("a timed-out body was stored")
		}
		if p, _ := e.stored(81); p.Name != "before" {
			t.Errorf("a timed-out update changed the plant: %v", p)
		}
	})
}

// A request sent in chunks is answered, then its connection closed: with
// a Content-Length beside Transfer-Encoding it may be an attempt to
// smuggle a request past a proxy that reads the length (RFC 9112, section
// 6.1: the server must close the connection after answering it), and
// net/http, which serves such requests, drops the Content-Length before a
// handler sees whether there was one.
func TestChunkedRequestClosesItsConnection(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		body := `{"id":1,"name":"Fern"}`
		for _, length := range []string{"Content-Length: 5\r\n", ""} {
			conn, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n%s"+
				"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", e.writeToken, length, len(body), body)
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			answer, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !resp.Close {
				t.Errorf("a chunked create with %q: %d %s, Connection %q; want 200 and Connection: close", length, resp.StatusCode, answer, resp.Header.Get("Connection"))
			}
			if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
				t.Errorf("after the chunked request's answer: %q, %v; want the connection closed, the request after it unanswered", rest, err)
			}
		}
		// HTTP/1.0: net/http ignores the coding, so what a proxy sends as
		// the chunked body would be read as the next request. Every
		// HTTP/1.0 answer closes its connection, keep-alive asked or not.
		for _, length := range []string{"Content-Length: 5\r\n", ""} {
			conn, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			smuggled := fmt.Sprintf("GET /plants/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", e.readToken)
			fmt.Fprintf(conn, "GET /healthz HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n%sTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n%s",
				length, len(smuggled), smuggled, smuggled)
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(resp.Body)
			if !resp.Close {
				t.Errorf("HTTP/1.0 with a coding and %q: %d, Connection %q; want Connection: close", length, resp.StatusCode, resp.Header.Get("Connection"))
			}
			if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
				t.Errorf("after the HTTP/1.0 request's answer: %q, %v; want the connection closed", rest, err)
			}
		}
	})
}

// Requests on one kept-alive connection are each their own: the lean
// server reuses a connection's request, its header map and its URL
// (internal/http1), so nothing of one request may reach the next. A
// request without a token after one with it is refused; a conditional
// header, a query and a body's length are the request's alone.
func TestKeptAliveRequestsAreEachTheirOwn(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		conn, _ := dialRaw(t, e.addr)
		auth := "Authorization: Bearer " + e.writeToken + "\r\n"
		send := func(request string) (*http.Response, []byte) {
			t.Helper()
			if _, err := io.WriteString(conn, request); err != nil {
				t.Fatal(err)
			}
			resp, body := readRaw(t, conn, request)
			if resp.Close {
				t.Fatalf("%q closed the connection", request)
			}
			return resp, body
		}
		withBody := func(method, path, body string) string {
			return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, path, auth, len(body), body)
		}
		resp, body := send(withBody("POST", "/plants", `{"id":41,"name":"Fern","tag":"shade"}`))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("create: %d %s", resp.StatusCode, body)
		}
		resp, _ = send("GET /plants/41 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n")
		etag := resp.Header.Get("ETag")
		if resp, _ = send("GET /plants/41 HTTP/1.1\r\nHost: x\r\n" + auth + "If-None-Match: " + etag + "\r\n\r\n"); resp.StatusCode != http.StatusNotModified {
			t.Errorf("with If-None-Match: %d, want 304", resp.StatusCode)
		}
		if resp, _ = send("GET /plants/41 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n"); resp.StatusCode != http.StatusOK {
			t.Errorf("without If-None-Match after one with it: %d, want 200", resp.StatusCode)
		}
		resp, body = send("GET /plants/41 HTTP/1.1\r\nHost: x\r\n\r\n")
		wantError(t, resp, body, http.StatusUnauthorized)
		resp, body = send("GET /plants?tag=none HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n")
		if resp.StatusCode != http.StatusOK || string(body) != "[]" {
			t.Errorf("by a tag no plant has: %d %s, want 200 []", resp.StatusCode, body)
		}
		resp, body = send("GET /plants HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n")
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"id":41`) {
			t.Errorf("without a query after one with it: %d %s, want plant 41", resp.StatusCode, body)
		}
		resp, body = send(withBody("PUT", "/plants/41", `{"name":"Bracken"}`))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Bracken") {
			t.Errorf("a shorter body after a longer one: %d %s, want 200", resp.StatusCode, body)
		}
	})
}

// A '#' in the request target's path is refused with 400 on every route,
// the write not made: a fragment is not sent (RFC 9110, section 7.1), and
// Go's server would leave it in the path, where each route read it
// differently (a 404 on /plants, a bad id on /plants/1). One in the query
// is the parameter's.
func TestFragmentInTargetRefused(t *testing.T) {
	e := start(t, options{})
	auth := "Authorization: Bearer " + e.writeToken + "\r\n"
	for _, target := range []string{"/plants#x", "/plants/1#x", "/healthz#", "http://x/plants#y"} {
		resp, body := e.raw("GET " + target + " HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n")
		wantError(t, resp, body, http.StatusBadRequest, "'#'")
	}
	// In the query, a '#' is the parameter's, as Go's server reads it: a
	// tag "#herb" sent unescaped is that tag.
	e.create(`{"id":1,"name":"Basil","tag":"#herb"}`)
	resp, body := e.raw("GET /plants?tag=#herb HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n")
	if resp.StatusCode != 200 || !strings.Contains(string(body), "Basil") {
		t.Errorf("GET /plants?tag=#herb: %d %s", resp.StatusCode, body)
	}
	resp, body = e.raw("POST /plants#x HTTP/1.1\r\nHost: x\r\n" + auth +
		"Content-Type: application/json\r\nContent-Length: 23\r\n\r\n{\"id\":700,\"name\":\"fr\"}")
	wantError(t, resp, body, http.StatusBadRequest, "'#'")
	resp, body = e.raw("GET /plants/700 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n")
	wantError(t, resp, body, http.StatusNotFound)
}
