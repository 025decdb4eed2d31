package httpapi_test

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/plantstore/plantstore/internal/httpapi"
)

// listHeader reads a comma-separated header, all its values.
func listHeader(h http.Header, name string) []string {
	var items []string
	for _, v := range h.Values(name) {
		for item := range strings.SplitSeq(v, ",") {
			items = append(items, strings.TrimSpace(item))
		}
	}
	return items
}

func TestCORS(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		const app = "http://app.example:3000"
		e := start(t, options{cfg: httpapi.Config{CORSOrigins: []string{app}}})
		preflight := map[string]string{
			"Origin":                         app,
			"Access-Control-Request-Method":  "POST",
			"Access-Control-Request-Headers": "authorization, content-type",
		}
		resp, body := e.do("OPTIONS", "/plants", preflight, nil)
		if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
			t.Fatalf("preflight from an allowed origin: %d %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != app {
			t.Errorf("preflight: Access-Control-Allow-Origin %q", got)
		}
		for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
			if !slices.Contains(listHeader(resp.Header, "Access-Control-Allow-Methods"), m) {
				t.Errorf("preflight does not allow %s: %q", m, resp.Header.Get("Access-Control-Allow-Methods"))
			}
		}
		for _, h := range []string{"Authorization", "Content-Type", "If-Match"} {
			if !slices.Contains(listHeader(resp.Header, "Access-Control-Allow-Headers"), h) {
				t.Errorf("preflight does not allow %s: %q", h, resp.Header.Get("Access-Control-Allow-Headers"))
			}
		}
		if resp.Header.Get("Access-Control-Max-Age") == "" || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("preflight: Max-Age %q, Allow-Credentials %q", resp.Header.Get("Access-Control-Max-Age"), resp.Header.Get("Access-Control-Allow-Credentials"))
		}
		if !slices.Contains(listHeader(resp.Header, "Vary"), "Origin") {
			t.Errorf("preflight without Vary: Origin")
		}

		e.create(`{"id":1,"name":"a"}`)
		resp, _ = e.do("GET", "/plants?limit=1", map[string]string{"Origin": app, "Authorization": "Bearer " + e.readToken}, nil)
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != app {
			t.Errorf("a request from an allowed origin: %d, Allow-Origin %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
		for _, h := range []string{"Link", "ETag", "Latest-Event-Id", "Retry-After", "X-Request-Id"} {
			if !slices.Contains(listHeader(resp.Header, "Access-Control-Expose-Headers"), h) {
				t.Errorf("%s is not exposed: %q", h, resp.Header.Get("Access-Control-Expose-Headers"))
			}
		}
		if !slices.Contains(listHeader(resp.Header, "Vary"), "Origin") {
			t.Error("an answer that depends on Origin without Vary: Origin")
		}

		// Another origin gets no CORS header: its browser keeps the answer
		// from its page. The preflight is then an OPTIONS like any other.
		other := map[string]string{"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
		resp, _ = e.do("OPTIONS", "/plants", other, nil)
		if resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.StatusCode == http.StatusNoContent {
			t.Errorf("preflight from another origin: %d, Allow-Origin %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
		resp, _ = e.do("GET", "/plants/1", map[string]string{"Origin": "http://evil.example", "Authorization": "Bearer " + e.readToken}, nil)
		if resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Access-Control-Expose-Headers") != "" {
			t.Errorf("another origin got CORS headers: %v", resp.Header)
		}
	})
}

// A refusal made before routing is readable by an allowed page too: a
// page that sent too much learns why, rather than a bare network error.
func TestCORSOnRefusalsBeforeRouting(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		const app = "http://app.example:3000"
		e := start(t, options{cfg: httpapi.Config{CORSOrigins: []string{app}}, limits: httpapi.ServerLimits{MaxHeaderBytes: 1024}})
		big := map[string]string{"Origin": app, "Authorization": "Bearer " + e.readToken, "X-Pad": strings.Repeat("p", 1500)}
		resp, body := e.do("GET", "/plants", big, nil)
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("oversized headers: %d %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != app {
			t.Errorf("a 431 to an allowed origin: Access-Control-Allow-Origin %q", got)
		}
		if !slices.Contains(listHeader(resp.Header, "Vary"), "Origin") {
			t.Errorf("a 431 to an allowed origin without Vary: Origin")
		}
		big["Origin"] = "http://evil.example"
		resp, _ = e.do("GET", "/plants", big, nil)
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("oversized headers from another origin: %d, Allow-Origin %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
		// A preflight past the limit is refused, not answered 204.
		preflight := map[string]string{"Origin": app, "Access-Control-Request-Method": "POST", "X-Pad": strings.Repeat("p", 1500)}
		if resp, body := e.do("OPTIONS", "/plants", preflight, nil); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge ||
			resp.Header.Get("Access-Control-Allow-Methods") != "" {
			t.Errorf("an oversized preflight: %d, Allow-Methods %q, %s", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Methods"), body)
		}
		// A Host that Go's server takes and this service refuses, and a
		// target of "*" with a method other than OPTIONS: both 400, both
		// readable by the page.
		for _, request := range []string{
			"GET /plants HTTP/1.1\r\nHost: x:99999\r\nOrigin: " + app + "\r\n\r\n",
			"GET * HTTP/1.1\r\nHost: x\r\nOrigin: " + app + "\r\n\r\n",
		} {
			conn, br := dialRaw(t, e.addr)
			io.WriteString(conn, request)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%q: %v", request, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Access-Control-Allow-Origin") != app {
				t.Errorf("%q: %d, Allow-Origin %q", request, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
			}
		}
	})
}

func TestCORSAnyOriginAndOff(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		anyOrigin := start(t, options{cfg: httpapi.Config{CORSOrigins: []string{"*"}}})
		resp, _ := anyOrigin.do("GET", "/healthz", map[string]string{"Origin": "http://anywhere.example"}, nil)
		if resp.Header.Get("Access-Control-Allow-Origin") != "*" || slices.Contains(listHeader(resp.Header, "Vary"), "Origin") {
			t.Errorf("--cors-origins *: Allow-Origin %q, Vary %q", resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Values("Vary"))
		}
		off := start(t, options{})
		resp, _ = off.do("OPTIONS", "/plants", map[string]string{"Origin": "http://a.example", "Access-Control-Request-Method": "GET"}, nil)
		if resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("CORS off: a preflight got %d, Allow-Origin %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	})
}

func TestParseCORSOrigins(t *testing.T) {
	if got, err := httpapi.ParseCORSOrigins(" https://A.example , http://b.example:8080 "); err != nil || !slices.Equal(got, []string{"https://a.example", "http://b.example:8080"}) {
		t.Errorf("two origins: %q %v", got, err)
	}
	for _, bad := range []string{"a.example", "https://a.example/path", "ftp://a.example", "*, https://a.example", "https://u@a.example"} {
		if _, err := httpapi.ParseCORSOrigins(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
