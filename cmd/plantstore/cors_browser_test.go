package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A web page on one origin lists and creates plants on the API at
// another, in headless Chromium, when --cors-origins names the page's
// origin; a page on an origin it does not name is blocked by the browser.
// Like TestDocsPageInBrowser, it needs Chromium, and fails without it when
// PLANTSTORE_TEST_BROWSER is set (CI).
func TestCORSInBrowser(t *testing.T) {
	browser := requireBrowser(t)
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "web")
	var api string
	results := make(chan string, 2)
	pages := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost { // the page reports what it saw, to its own origin
			b, _ := io.ReadAll(r.Body)
			results <- string(b)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, corsPage, api, token)
	})
	// The pages' addresses are known before they serve, and the API's
	// before they start: api is set once, before any page is served.
	page := httptest.NewUnstartedServer(pages)
	defer page.Close()
	stranger := httptest.NewUnstartedServer(pages) // the same page on an origin not allowed
	defer stranger.Close()
	s := serve(t, dir, "--cors-origins", "http://"+page.Listener.Addr().String())
	api = s.url
	page.Start()
	stranger.Start()

	if got := browse(t, browser, page.URL, results); !strings.Contains(got, "created 200 Monstera | listed 1 Monstera etag W/") || !strings.Contains(got, "blocked no") {
		t.Errorf("the page on the allowed origin saw %q", got)
	}
	if got := browse(t, browser, stranger.URL, results); got != "blocked yes" {
		t.Errorf("the page on another origin saw %q, want its requests blocked", got)
	}
}

// browse opens url in headless Chromium and returns what the page reports
// on results, waiting in real time (a loaded machine can be slow) and
// closing the browser after.
func browse(t *testing.T, browser, url string, results chan string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+browserProfile(t), url)
	// Its own process group, killed whole: the browser's helper processes
	// go with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() {
		cancel() // kills the browser, which would otherwise stay on the page
		cmd.Wait()
	}()
	select {
	case got := <-results:
		return got
	case <-time.After(60 * time.Second):
		t.Fatalf("the page at %s reported nothing within 60 s", url)
		return ""
	}
}

// corsPage creates a plant on the API (%s) with a token (%s), then lists
// it, writes what it saw into the page and reports it to its own origin;
// a request the browser blocks makes fetch fail: "blocked yes".
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
  await fetch("/result", {method: "POST", body: out.textContent});
})();
</script></body></html>`
