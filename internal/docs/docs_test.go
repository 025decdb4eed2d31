package docs

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPageLoadsOnlyFromThisService(t *testing.T) {
	rec := httptest.NewRecorder()
	Page("Plant Store API").ServeHTTP(rec, httptest.NewRequest("GET", "/docs", nil))
	body := rec.Body.String()
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /docs: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	for _, want := range []string{`<title>Plant Store API</title>`, `src="docs/redoc-3.0.1.standalone.js"`, `<redoc spec-url="openapi.json"`, `type="module"`, `disable-telemetry="true"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, "http://") || strings.Contains(body, "https://") || strings.Contains(body, `src="/`) {
		t.Errorf("the page loads something from elsewhere, or by an absolute path:\n%s", body)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
}

func TestBundle(t *testing.T) {
	get := func(acceptEncoding string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", BundlePath, nil)
		if acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", acceptEncoding)
		}
		rec := httptest.NewRecorder()
		Bundle().ServeHTTP(rec, req)
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/javascript") {
			t.Fatalf("GET %s: %d %q", BundlePath, rec.Code, rec.Header().Get("Content-Type"))
		}
		return rec
	}
	zipped := get("gzip, deflate, br")
	if zipped.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("a gzip-accepting client got Content-Encoding %q", zipped.Header().Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(zipped.Body.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	for _, ae := range []string{"", "identity", "gzip;q=0", "gzip;q=0, *", "gzip;q=0.5, identity;q=1"} {
		plain := get(ae)
		if plain.Header().Get("Content-Encoding") != "" || !bytes.Equal(plain.Body.Bytes(), unzipped) {
			t.Errorf("Accept-Encoding %q: encoding %q, %d bytes; want the plain bundle", ae, plain.Header().Get("Content-Encoding"), plain.Body.Len())
		}
	}
	if len(unzipped) < 1<<20 || !bytes.Contains(unzipped, []byte("Redoc")) {
		t.Errorf("the bundle (%d bytes) does not look like Redoc's", len(unzipped))
	}
	if !strings.Contains(License, "MIT") {
		t.Errorf("Redoc's licence is missing")
	}
	if got := zipped.Header().Get("Cache-Control"); !strings.Contains(got, "immutable") {
		t.Errorf("Cache-Control %q", got)
	}
}
