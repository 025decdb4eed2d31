package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// A web page on one origin lists and creates plants on the API at
// another, in headless Chromium, when --cors-origins names the page's
// origin; a page on an origin it does not name is blocked by the browser.
// Like TestDocsPageInBrowser, it needs Chromium, and fails without it when
// PLANTSTORE_TEST_BROWSER is set (CI).
func TestCORSInBrowser(t *testing.T) {
	browser := findBrowser()
	if browser == "" {
		if os.Getenv("PLANTSTORE_TEST_BROWSER") != "" {
			t.Fatal("PLANTSTORE_TEST_BROWSER is set but no chromium is installed (apt-get install chromium)")
		}
		t.Skip("no chromium installed; set PLANTSTORE_TEST_BROWSER=1 to require it (CI does)")
	}
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "web")
	var api string
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, corsPage, api, token)
	}))
	defer page.Close()
	stranger := httptest.NewServer(page.Config.Handler) // the same page on an origin not allowed
	defer stranger.Close()
	s := serve(t, dir, "--cors-origins", page.URL)
	api = s.url

	text := strings.Join(renderedText(t, browser, page.URL), " | ")
	for _, want := range []string{"created 200 Monstera", "listed 1 Monstera etag W/", "blocked no"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page on the allowed origin shows %q, want %q", text, want)
		}
	}
	text = strings.Join(renderedText(t, browser, stranger.URL), " | ")
	if !strings.Contains(text, "blocked yes") {
		t.Errorf("the page on another origin shows %q, want its requests blocked", text)
	}
}

// corsPage creates a plant on the API (%s) with a token (%s), then lists
// it, and writes what it saw into the page; a request the browser blocks
// makes fetch fail, which the page writes as "blocked yes".
const corsPage = `<!DOCTYPE html>
<html><head><title>cors</title></head><body><p id="out">running</p>
<script>
const api = %q, token = %q;
const out = document.getElementById("out");
(async () => {
  try {
    const created = await fetch(api + "/plants", {method: "POST",
      headers: {"Authorization": "Bearer " + token, "Content-Type": "application/json"},
      body: JSON.stringify({id: 1, name: "Monstera"})});
    const plant = await created.json();
    const listed = await fetch(api + "/plants?limit=10", {headers: {"Authorization": "Bearer " + token}});
    const page = await listed.json();
    out.textContent = "created " + created.status + " " + plant.name + " | listed " + page.length + " " +
      page[0].name + " etag " + listed.headers.get("ETag") + " | blocked no";
  } catch (e) {
    out.textContent = "blocked yes";
  }
})();
</script></body></html>`
