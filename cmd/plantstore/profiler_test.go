package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/apitest"
)

// --pprof-addr serves Go's profiler on a listener of its own, never on
// the API's port; on an address beyond loopback serve warns, as the docs
// say to keep it on loopback. The log's format takes any case, as its
// level does.
func TestProfilerListener(t *testing.T) {
	client := apitest.Client(t)
	s := serve(t, t.TempDir(), "--pprof-addr", "127.0.0.1:0", "--log-format", "JSON")
	if !s.logged(`"msg":"profiler listening"`, 5*time.Second) {
		t.Fatalf("no profiler listening line:\n%s", s.logs)
	}
	m := regexp.MustCompile(`"msg":"profiler listening","addr":"([^"]+)"`).FindStringSubmatch(s.logs.String())
	if m == nil {
		t.Fatalf("the profiler listening line has no address:\n%s", s.logs)
	}
	get := func(c *http.Client, url string) int {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Not the API's contract: a plain client.
	if status := get(&http.Client{Timeout: 10 * time.Second}, "http://"+m[1]+"/debug/pprof/"); status != http.StatusOK {
		t.Errorf("the profiler's index: %d, want 200", status)
	}
	if status := get(client, s.url+"/debug/pprof/"); status != http.StatusNotFound {
		t.Errorf("the profiler on the API's port: %d, want 404", status)
	}
	if strings.Contains(s.logs.String(), "beyond loopback") {
		t.Errorf("a warning for a profiler on loopback:\n%s", s.logs)
	}

	wide := serve(t, t.TempDir(), "--pprof-addr", "0.0.0.0:0")
	if !wide.logged(`"level":"WARN","msg":"the profiler is reachable beyond loopback`, 5*time.Second) {
		t.Errorf("no warning for a profiler on a wildcard address:\n%s", wide.logs)
	}
}
