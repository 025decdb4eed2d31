package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/plantstore/plantstore/internal/httpapi"
)

// A page over 1 KiB goes gzipped to a client that takes gzip, with Vary:
// Accept-Encoding; small pages, plants and errors never are.
func TestPagesCompressed(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		for id := 1; id <= 50; id++ {
			e.create(fmt.Sprintf(`{"id":%d,"name":"plant number %d","tag":"compressible"}`, id, id))
		}
		auth := map[string]string{"Authorization": "Bearer " + e.readToken}
		plain, plainBody := e.do("GET", "/plants?limit=50", auth, nil)
		gzAuth := map[string]string{"Authorization": "Bearer " + e.readToken, "Accept-Encoding": "br;q=1, gzip;q=0.8"}
		resp, body := e.do("GET", "/plants?limit=50", gzAuth, nil)
		if resp.Header.Get("Content-Encoding") != "gzip" || !slices.Contains(resp.Header.Values("Vary"), "Accept-Encoding") {
			t.Fatalf("a 50-plant page to a gzip client: Content-Encoding %q, Vary %q", resp.Header.Get("Content-Encoding"), resp.Header.Values("Vary"))
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if unzipped, _ := io.ReadAll(zr); !bytes.Equal(unzipped, plainBody) || len(body) >= len(plainBody)/2 {
			t.Errorf("gzipped page: %d bytes for %d; decompresses to the plain page: %v", len(body), len(plainBody), bytes.Equal(unzipped, plainBody))
		}
		if plain.Header.Get("Content-Encoding") != "" || !slices.Contains(plain.Header.Values("Vary"), "Accept-Encoding") {
			t.Errorf("a page to a client without gzip: Content-Encoding %q, Vary %q", plain.Header.Get("Content-Encoding"), plain.Header.Values("Vary"))
		}
		if resp.Header.Get("ETag") != plain.Header.Get("ETag") {
			t.Errorf("the page's weak ETag differs with its coding: %q, %q", resp.Header.Get("ETag"), plain.Header.Get("ETag"))
		}
		for _, path := range []string{"/plants?limit=1", "/plants/1", "/plants/999", "/plants?limit=0"} {
			resp, _ := e.do("GET", path, gzAuth, nil)
			if resp.Header.Get("Content-Encoding") != "" {
				t.Errorf("%s (%d) gzipped", path, resp.StatusCode)
			}
		}
		// RFC 9110, section 12.5.3: gzip's own entry decides; * stands
		// for codings not listed; gzip goes unless identity, named or
		// through *, weighs more.
		for accept, want := range map[string]string{
			"gzip;q=0, identity": "", "gzip;q=0, *": "", "*;q=1, gzip;Q=0": "", "x-gzip;q=0.000, *": "",
			"gzip;q=bad": "", "*;q=0": "", "identity": "", "br": "",
			// Weights outside RFC 9110's grammar are malformed: 0.
			"gzip;q=nan, *": "", "gzip;q=.5": "", "gzip;q=0.5000": "", "gzip;q=1e-1": "", "gzip;q=1.001": "",
			"*": "gzip", "br, *;q=0.1": "gzip", "gzip;q=0, x-gzip;q=0.5": "gzip", "GZIP ; q=0.001": "gzip",
			"identity;q=1, gzip;q=0.1": "", "gzip;q=0.5, Identity": "", "*;q=0.5, gzip;q=0.3": "",
			"gzip;q=0.5": "gzip", "gzip;q=0.5, identity;q=0.5": "gzip", "identity;q=0, gzip;q=0.1": "gzip",
			"gzip;q=0.2, identity;q=bad": "gzip", "*;q=0.5, identity;q=0.1": "gzip",
		} {
			h := map[string]string{"Authorization": "Bearer " + e.readToken, "Accept-Encoding": accept}
			if resp, _ := e.do("GET", "/plants?limit=50", h, nil); resp.Header.Get("Content-Encoding") != want {
				t.Errorf("Accept-Encoding %q: Content-Encoding %q, want %q", accept, resp.Header.Get("Content-Encoding"), want)
			}
		}
	})
}

// The next page's link is absolute: the connection's scheme and the
// request's host, or what a trusted proxy says the client asked for;
// --public-url beats both.
func TestNextLinkAbsolute(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		link := func(e *env, header map[string]string) string {
			h := map[string]string{"Authorization": "Bearer " + e.readToken}
			for k, v := range header {
				h[k] = v
			}
			resp, _ := e.do("GET", "/plants?limit=1", h, nil)
			return resp.Header.Get("Link")
		}
		seed := func(e *env) {
			e.create(`{"id":1,"name":"a"}`)
			e.create(`{"id":2,"name":"b"}`)
		}
		const want = `<%s/plants?after=1&limit=1>; rel="next"`
		direct := start(t, options{})
		seed(direct)
		if got := link(direct, nil); got != fmt.Sprintf(want, direct.url) {
			t.Errorf("direct: %s", got)
		}
		// From a peer it does not trust, the proxy headers are the
		// client's own words, and ignored.
		forged := map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example"}
		if got := link(direct, forged); got != fmt.Sprintf(want, direct.url) {
			t.Errorf("forwarded headers from an untrusted peer: %s", got)
		}
		proxied := start(t, options{cfg: httpapi.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
		seed(proxied)
		if got := link(proxied, map[string]string{"X-Forwarded-Proto": "http, https", "X-Forwarded-Host": "client.example, api.example.com"}); got != fmt.Sprintf(want, "https://api.example.com") {
			t.Errorf("X-Forwarded-* from a trusted proxy: %s", got)
		}
		if got := link(proxied, map[string]string{"Forwarded": `for=192.0.2.1;proto=http, for=198.51.100.2;host="api.example.com:8443";proto=https`}); got != fmt.Sprintf(want, "https://api.example.com:8443") {
			t.Errorf("Forwarded from a trusted proxy: %s", got)
		}
		if got := link(proxied, map[string]string{"X-Forwarded-Host": "bad host/x", "X-Forwarded-Proto": "gopher"}); got != fmt.Sprintf(want, proxied.url) {
			t.Errorf("malformed forwarded values: %s", got)
		}
		public := start(t, options{cfg: httpapi.Config{PublicURL: "https://plants.example/store"}})
		seed(public)
		if got := link(public, forged); got != fmt.Sprintf(want, "https://plants.example/store") {
			t.Errorf("--public-url: %s", got)
		}
		resp, _ := public.do("GET", "/plants?limit=1", map[string]string{"Authorization": "Bearer " + public.readToken}, nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%d", resp.StatusCode)
		}

		// The served document's servers name the same base URL, judged
		// the same way.
		for _, tc := range []struct {
			name   string
			e      *env
			header map[string]string
			want   string
		}{
			{"direct", direct, nil, direct.url},
			{"forwarded headers from an untrusted peer", direct, forged, direct.url},
			{"X-Forwarded-* from a trusted proxy", proxied, forged, "https://evil.example"},
			{"Forwarded from a trusted proxy", proxied, map[string]string{"Forwarded": `proto=https;host="api.example.com"`}, "https://api.example.com"},
			{"--public-url", public, forged, "https://plants.example/store"},
		} {
			for _, path := range []string{"/openapi.json", "/openapi.yaml"} {
				resp, body := tc.e.do("GET", path, tc.header, nil)
				want := `"url":"` + tc.want + `"`
				if path == "/openapi.yaml" {
					want = `url: "` + tc.want + `"`
				}
				if resp.StatusCode != http.StatusOK || !strings.Contains(strings.ReplaceAll(string(body), `"url": "`, `"url":"`), want) {
					t.Errorf("%s: %s's servers do not hold %s", tc.name, path, want)
				}
				// A cache between a trusted proxy and the server keys the
				// document on what the proxy said, as the document does.
				vary := strings.Join(resp.Header.Values("Vary"), ", ")
				if strings.Contains(vary, "X-Forwarded-Host") != (tc.e == proxied) {
					t.Errorf("%s: %s's Vary is %q", tc.name, path, vary)
				}
				// And on the Host the client sent, unless --public-url
				// names the servers whatever the request.
				if slices.Contains(strings.Split(vary, ", "), "Host") != (tc.e != public) {
					t.Errorf("%s: %s's Vary is %q", tc.name, path, vary)
				}
			}
		}
	})
}

// A Host that cannot begin a URL is refused with 400 and the connection
// closed (RFC 9112, section 3.2), on the fast path and off it; a valid one
// begins the links. An HTTP/1.0 request may come without Host: its links
// name the address it reached.
func TestHostChecked(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		e.create(`{"id":1,"name":"a"}`)
		e.create(`{"id":2,"name":"b"}`)
		get := func(proto, host string) (*http.Response, []byte) {
			head := "GET /plants?limit=1 " + proto + "\r\nAuthorization: Bearer " + e.readToken + "\r\n"
			if host != "none" {
				head += "Host: " + host + "\r\n"
			}
			return e.raw(head + "\r\n")
		}
		for _, host := range []string{"", "x:abc", "x:99999", "a%b", "[::1", "::1", "[fe80::1%25eth0]", "a!b", ":80"} {
			resp, body := get("HTTP/1.1", host)
			wantError(t, resp, body, http.StatusBadRequest, "Host")
			if !resp.Close {
				t.Errorf("Host %q: the connection stays open after the 400", host)
			}
		}
		for host, base := range map[string]string{
			"api.example": "http://api.example", "API.example:8080": "http://API.example:8080",
			"192.0.2.1:65535": "http://192.0.2.1:65535", "[2001:db8::1]": "http://[2001:db8::1]", "[::1]:80": "http://[::1]:80",
		} {
			resp, body := get("HTTP/1.1", host)
			if want := `<` + base + `/plants?after=1&limit=1>; rel="next"`; resp.StatusCode != 200 || resp.Header.Get("Link") != want {
				t.Errorf("Host %q: %d %s, Link %q, want %q", host, resp.StatusCode, body, resp.Header.Get("Link"), want)
			}
		}
		// An absolute-form target names the host instead (Go takes it
		// over the header): one with no host or with user information is
		// refused (RFC 9110, sections 4.2.1 and 4.2.4), as is one of
		// another scheme, and one with a bad host is said to be the
		// target's; one with a host begins the links.
		for target, words := range map[string]string{
			"http:///plants?limit=1":                "not an http or https URL with a host and no user information",
			"http://u@api.example/plants?limit=1":   "not an http or https URL with a host and no user information",
			"http://u:p@api.example/plants?limit=1": "not an http or https URL with a host and no user information",
			"ftp://api.example/plants?limit=1":      "not an http or https URL with a host and no user information",
			"http://a!b/plants?limit=1":             `the request target's host "a!b"`,
		} {
			resp, body := e.raw("GET " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.readToken + "\r\n\r\n")
			wantError(t, resp, body, http.StatusBadRequest, words)
			if !resp.Close {
				t.Errorf("GET %s: the connection stays open after the 400", target)
			}
		}
		for _, target := range []string{"HTTPS://api.example/plants?limit=1", "https://api.example/plants?limit=1"} {
			if resp, body := e.raw("GET " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.readToken + "\r\n\r\n"); resp.StatusCode != 200 {
				t.Errorf("GET %s: %d %s", target, resp.StatusCode, body)
			}
		}
		resp, body := e.raw("GET http://api.example/plants?limit=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.readToken + "\r\n\r\n")
		if want := `<http://api.example/plants?after=1&limit=1>; rel="next"`; resp.StatusCode != 200 || resp.Header.Get("Link") != want {
			t.Errorf("an absolute-form target: %d %s, Link %q, want %q", resp.StatusCode, body, resp.Header.Get("Link"), want)
		}
		// A CORS preflight is no way around it.
		cors := start(t, options{cfg: httpapi.Config{CORSOrigins: []string{"https://app.example"}}})
		resp, body = cors.raw("OPTIONS /plants HTTP/1.1\r\nHost: x:abc\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n\r\n")
		wantError(t, resp, body, http.StatusBadRequest, "Host")
		resp, body = get("HTTP/1.0", "none")
		if want := `<` + e.url + `/plants?after=1&limit=1>; rel="next"`; resp.StatusCode != 200 || resp.Header.Get("Link") != want {
			t.Errorf("HTTP/1.0 without Host: %d %s, Link %q, want %q", resp.StatusCode, body, resp.Header.Get("Link"), want)
		}
	})
}

// A single plant over 1 KiB goes gzipped to a gzip client, under an ETag
// of its own that either coding's tag matches in If-None-Match and
// If-Match; every answer of the compressible routes, errors included,
// says Vary: Accept-Encoding.
func TestPlantCompressedAndVary(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		long := strings.Repeat("🌿", 200) // 800 bytes of name
		e.create(fmt.Sprintf(`{"id":7,"name":%q,"tag":%q}`, long, strings.Repeat("🪴", 100)))
		auth := map[string]string{"Authorization": "Bearer " + e.readToken}
		gzAuth := map[string]string{"Authorization": "Bearer " + e.readToken, "Accept-Encoding": "gzip"}
		identity := map[string]string{"Authorization": "Bearer " + e.readToken, "Accept-Encoding": "identity"}
		plain, plainBody := e.do("GET", "/plants/7", identity, nil)
		resp, body := e.do("GET", "/plants/7", gzAuth, nil)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" || len(plainBody) <= 1024 {
			t.Fatalf("a %d-byte plant to a gzip client: %d, Content-Encoding %q", len(plainBody), resp.StatusCode, resp.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if unzipped, _ := io.ReadAll(zr); !bytes.Equal(unzipped, plainBody) {
			t.Errorf("the gzipped plant decompresses to %q, want %q", unzipped, plainBody)
		}
		plainTag, gzTag := plain.Header.Get("ETag"), resp.Header.Get("ETag")
		if plain.Header.Get("Content-Encoding") != "" || plainTag == gzTag || strings.HasPrefix(gzTag, "W/") ||
			gzTag != strings.TrimSuffix(plainTag, `"`)+`-gz"` {
			t.Errorf("ETags: %q plain, %q gzipped; want two strong tags, the gzipped one ending -gz", plainTag, gzTag)
		}
		for _, tag := range []string{plainTag, gzTag} {
			h := map[string]string{"Authorization": "Bearer " + e.readToken, "Accept-Encoding": "gzip", "If-None-Match": tag}
			if resp, _ := e.do("GET", "/plants/7", h, nil); resp.StatusCode != 304 || resp.Header.Get("ETag") != gzTag {
				t.Errorf("If-None-Match %s to a gzip client: %d, ETag %q; want 304 with %q", tag, resp.StatusCode, resp.Header.Get("ETag"), gzTag)
			}
			// A client that kept the gzipped answer may ask again without
			// gzip: the tag still names the plant's state.
			h = map[string]string{"Authorization": "Bearer " + e.readToken, "Accept-Encoding": "identity", "If-None-Match": tag}
			if resp, _ := e.do("GET", "/plants/7", h, nil); resp.StatusCode != 304 || resp.Header.Get("ETag") != plainTag {
				t.Errorf("If-None-Match %s to a client without gzip: %d, ETag %q; want 304 with %q", tag, resp.StatusCode, resp.Header.Get("ETag"), plainTag)
			}
		}
		put := func(ifMatch string) int {
			resp, _ := e.do("PUT", "/plants/7", map[string]string{"Authorization": "Bearer " + e.writeToken,
				"Content-Type": "application/json", "If-Match": ifMatch}, strings.NewReader(`{"name":"short now"}`))
			return resp.StatusCode
		}
		if status := put(`"` + strings.Repeat("A", 22) + `-gz"`); status != 412 {
			t.Errorf("PUT with a made-up gzip tag: %d, want 412", status)
		}
		if status := put(gzTag); status != 200 {
			t.Errorf("PUT with If-Match the gzipped answer's tag: %d, want 200", status)
		}
		for _, c := range []struct {
			path   string
			header map[string]string
		}{
			{"/plants", nil}, {"/plants/7", nil}, {"/events", nil}, // 401
			{"/plants?limit=0", auth}, {"/plants/x", auth}, {"/plants/404", auth}, {"/events?limit=0", auth},
		} {
			resp, body := e.do("GET", c.path, c.header, nil)
			if resp.StatusCode < 400 || !slices.Contains(resp.Header.Values("Vary"), "Accept-Encoding") {
				t.Errorf("GET %s: %d %s, Vary %q; want an error saying Vary: Accept-Encoding", c.path, resp.StatusCode, body, resp.Header.Values("Vary"))
			}
		}
	})
}
