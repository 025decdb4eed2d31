package main

import (
	"context"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The API reference page, opened in headless Chromium as a reader would
// open it: it renders POST /plants, on this server's URL, and the Plant,
// NewPlant and Error schemas, from this service alone.
//
// It needs Chromium (Debian's chromium package). .ci/run installs it and
// sets PLANTSTORE_TEST_BROWSER=1, which turns a missing browser into a
// failure instead of a skip. PLANTSTORE_SCREENSHOT=FILE also saves a
// screenshot of the page (docs/api-reference.png is one).
func TestDocsPageInBrowser(t *testing.T) {
	browser := requireBrowser(t)
	s := serve(t, t.TempDir())

	operation := renderedText(t, browser, s.url+"/docs#/plants/addplant")
	if i := slices.Index(operation, "POST"); i < 0 || i+1 >= len(operation) || operation[i+1] != "/plants" {
		t.Errorf("the page for creating a plant does not show POST /plants:\n%s", strings.Join(operation, " | "))
	}
	if !slices.Contains(operation, "Create a plant") {
		t.Errorf("the page lacks the operation's summary")
	}
	// The Servers panel names where the reader reached the service, not
	// the document's {base_url} template.
	if !slices.Contains(operation, s.url+"/plants") || slices.ContainsFunc(operation, func(text string) bool { return strings.Contains(text, "{base_url}") }) {
		t.Errorf("the Servers panel does not show %s/plants:\n%s", s.url, strings.Join(operation, " | "))
	}
	schemas := renderedText(t, browser, s.url+"/docs#/schemas")
	for _, name := range []string{"Plant", "NewPlant", "Error"} {
		if !slices.Contains(schemas, name) {
			t.Errorf("the schemas section does not show %s:\n%s", name, strings.Join(schemas, " | "))
		}
	}
	// Everything the page loaded came from this service: its log shows
	// the page, its script and the document.
	for _, path := range []string{`"path":"/docs"`, `"path":"/docs/redoc-3.0.1.standalone.js"`, `"path":"/openapi.json"`} {
		if !strings.Contains(s.logs.String(), path) {
			t.Errorf("the page did not load %s from the service", path)
		}
	}
	if shot := os.Getenv("PLANTSTORE_SCREENSHOT"); shot != "" {
		abs, err := filepath.Abs(shot)
		if err != nil {
			t.Fatal(err)
		}
		chromium(t, browser, "--window-size=1280,900", "--screenshot="+abs, s.url+"/docs")
	}
}

// requireBrowser returns Chromium's path, or skips t when it is not
// installed; with PLANTSTORE_TEST_BROWSER set (CI) it fails t instead.
func requireBrowser(t *testing.T) string {
	t.Helper()
	browser := findBrowser()
	if browser == "" {
		if os.Getenv("PLANTSTORE_TEST_BROWSER") != "" {
			t.Fatal("PLANTSTORE_TEST_BROWSER is set but no chromium is installed (apt-get install chromium)")
		}
		t.Skip("no chromium installed; set PLANTSTORE_TEST_BROWSER=1 to require it (CI does)")
	}
	return browser
}

func findBrowser() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	return ""
}

// chromium runs the headless browser on url with args and returns what it
// printed on stdout.
func chromium(t *testing.T, browser string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir=" + browserProfile(t), "--virtual-time-budget=15000"}
	out, err := exec.CommandContext(ctx, browser, append(base, args...)...).Output()
	if err != nil {
		t.Fatalf("%s: %v", browser, err)
	}
	return string(out)
}

// browserProfile is a fresh profile directory for one browser run.
// Chromium's helper processes can outlive the one a test waited for, and
// write in it a moment longer, so its removal is retried for a while
// (t.TempDir's would fail the test on "directory not empty").
func browserProfile(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "plantstore-browser-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for err := os.RemoveAll(dir); err != nil; err = os.RemoveAll(dir) {
			if time.Now().After(deadline) {
				t.Errorf("removing the browser's profile: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dir
}

var (
	scriptsAndStyles = regexp.MustCompile(`(?s)<script.*?</script>|<style.*?</style>`)
	markup           = regexp.MustCompile(`<[^>]+>`)
)

// renderedText is the page's text after its scripts ran, one piece of text
// per element.
func renderedText(t *testing.T, browser, url string) []string {
	t.Helper()
	dom := chromium(t, browser, "--dump-dom", url)
	text := markup.ReplaceAllString(scriptsAndStyles.ReplaceAllString(dom, ""), "\n")
	var pieces []string
	for line := range strings.Lines(html.UnescapeString(text)) {
		if line = strings.TrimSpace(line); line != "" {
			pieces = append(pieces, line)
		}
	}
	return pieces
}
