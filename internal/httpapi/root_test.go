package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// GET / points to the reference and the document: JSON for a program,
// a small page for a browser; /docs/ leads to /docs. (Issue 17, point 6.)
func TestRootPointsToTheDocs(t *testing.T) {
	e := start(t, options{})
	resp, body := e.do("GET", "/", map[string]string{"Accept": "*/*"}, nil)
	var root struct{ Name, Docs, OpenAPI string }
	if err := json.Unmarshal(body, &root); err != nil || resp.StatusCode != 200 ||
		root.Docs != e.url+"/docs" || root.OpenAPI != e.url+"/openapi.json" || root.Name == "" {
		t.Errorf("GET / for a program: %d %s (%v)", resp.StatusCode, body, err)
	}
	resp, body = e.do("GET", "/", map[string]string{"Accept": "text/html,*/*;q=0.8"}, nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), `href="`+e.url+`/docs"`) {
		t.Errorf("GET / for a browser: %d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	// Qualities decide (RFC 9110, section 12.5.1), each kind judged by the
	// most specific range naming it; a tie goes to the one listed first.
	for accept, html := range map[string]bool{
		"text/html":                               true,
		"text/html, application/json":             true,
		"application/json, text/html":             false,
		"text/html;q=0, application/json":         false,
		"text/html;q=0":                           false,
		"text/html;q=0.1, application/json":       false,
		"application/json;q=0.5, text/html;q=0.9": true,
		"text/*, application/json;q=0.9":          true,
		"*/*;q=0.8, text/html":                    true,
		"text/html;q=0, */*":                      false,
		"text/html;q=bad, application/json;q=0.1": false,
		"image/png":                               false,
		"":                                        false,
	} {
		resp, _ := e.do("GET", "/", map[string]string{"Accept": accept}, nil)
		if got := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html"); resp.StatusCode != 200 || got != html {
			t.Errorf("GET / with Accept %q: %d %s, HTML %v, want %v", accept, resp.StatusCode, resp.Header.Get("Content-Type"), got, html)
		}
	}
	noRedirect := *e.client
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for path, want := range map[string]string{"/docs/": "/docs", "/docs/?x=1&y=%2B": "/docs?x=1&y=%2B"} {
		req, _ := http.NewRequest("GET", e.url+path, nil)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != e.url+want {
			t.Errorf("GET %s: %d, Location %q, want %s", path, resp.StatusCode, resp.Header.Get("Location"), e.url+want)
		}
	}
}
