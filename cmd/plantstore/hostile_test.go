package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// What a server says cannot drive the terminal: escape sequences, control
// and invisible characters in its error message, an event's type or an
// ETag come out escaped, and a message of megabytes is cut. A stand-in
// server: plantstore's own never says such things.
func TestHostileServerTextEscaped(t *testing.T) {
	t.Parallel()
	evil := "\x1b[2J\x1b]0;pwned\x07 \u202eevil\u202c\nplantstore: forged line"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/plants/1":
			w.WriteHeader(404)
			fmt.Fprintf(w, `{"error":404,"message":%s}`, jsonString("not found"+evil))
		case "/plants/2":
			w.Header().Set("ETag", "\"ab\u202ecd\"")
			fmt.Fprint(w, `{"id":2,"name":"Fern"}`)
		case "/plants/3":
			w.WriteHeader(404)
			fmt.Fprintf(w, `{"error":404,"message":%s}`, jsonString(strings.Repeat("long ", 10_000)))
		case "/plants/5": // past what the client reads of an error (64 KiB)
			w.WriteHeader(404)
			fmt.Fprintf(w, `{"error":404,"message":%s}`, jsonString(strings.Repeat("long ", 200_000)))
		case "/plants/4": // a 500 names its request, which the service logged it under
			w.Header().Set("X-Request-Id", "ps-1\u202e2")
			w.WriteHeader(500)
			fmt.Fprint(w, `{"error":500,"message":"internal error"}`)
		case "/events":
			fmt.Fprintf(w, `[{"id":1,"type":%s,"time":"2026-01-01T00:00:00Z","plant":{"id":1,"name":"a"}}]`, jsonString("plant.created"+evil))
		}
	}))
	defer srv.Close()
	env := []string{"PLANTSTORE_SERVER=" + srv.URL, "PLANTSTORE_TOKEN=pst_x"}
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		out  func(result) string
		want string
	}{
		{[]string{"plants", "get", "1"}, func(r result) string { return r.stderr }, `not found\x1b[2J\x1b]0;pwned\a \u202eevil\u202c\nplantstore: forged line (HTTP 404)`},
		{[]string{"plants", "get", "2"}, func(r result) string { return r.stdout }, `"ab\u202ecd"`},
		{[]string{"events"}, func(r result) string { return r.stdout }, `plant.created\x1b[2J`},
		{[]string{"plants", "get", "4"}, func(r result) string { return r.stderr }, `internal error (HTTP 500, request ps-1\u202e2)`},
	} {
		r := cli(t, dir, env, tc.args...)
		out := tc.out(r)
		if !strings.Contains(out, tc.want) || strings.ContainsAny(out, "\x1b\x07\u202e") || strings.Count(r.stderr, "\n") > 1 {
			t.Errorf("%v: stdout %q, stderr %q; want %q, nothing raw", tc.args, r.stdout, r.stderr, tc.want)
		}
	}
	r := cli(t, dir, env, "plants", "get", "3")
	if len(r.stderr) > 1000 || !strings.Contains(r.stderr, "characters more) (HTTP 404)") {
		t.Errorf("a message of 50 KB: %d bytes on stderr, %.200q; want it cut", len(r.stderr), r.stderr)
	}
	r = cli(t, dir, env, "plants", "get", "5")
	if r.stderr != "plantstore: Not Found (HTTP 404)\n" {
		t.Errorf("a message of 1 MB: %d bytes on stderr, %.200q; want the status's text alone", len(r.stderr), r.stderr)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A server that accepts and never answers does not hang a command: each
// request has --timeout.
func TestSilentServerTimesOut(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	env := []string{"PLANTSTORE_SERVER=" + srv.URL, "PLANTSTORE_TOKEN=pst_x"}
	for _, args := range [][]string{{"plants", "get", "1"}, {"events"}} {
		start := time.Now()
		r := cli(t, t.TempDir(), env, append(args, "--timeout", "500ms")...)
		if r.exit != 1 || !strings.Contains(r.stderr, "did not answer in time (--timeout)") || time.Since(start) > 10*time.Second {
			t.Errorf("%v at a server that never answers: exit %d, %q after %v; want exit 1 within the timeout", args, r.exit, r.stderr, time.Since(start).Round(time.Millisecond))
		}
	}
	if r := cli(t, t.TempDir(), env, "plants", "get", "1", "--timeout", "0s"); r.exit != 2 {
		t.Errorf("--timeout 0s: exit %d, want 2", r.exit)
	}
	// An answer whose body trickles past the timeout is said the same way.
	trickle := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "100")
		for range 100 {
			if _, err := w.Write([]byte(" ")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}))
	defer trickle.Close()
	r := cli(t, t.TempDir(), []string{"PLANTSTORE_SERVER=" + trickle.URL, "PLANTSTORE_TOKEN=pst_x"}, "plants", "get", "1", "--timeout", "500ms")
	if r.exit != 1 || !strings.Contains(r.stderr, "did not answer in time (--timeout)") {
		t.Errorf("a body trickling past the timeout: exit %d, %q; want exit 1, not in time", r.exit, r.stderr)
	}
}

// events without --follow reads pages until one has no next page, never
// one that brings nothing new: a server whose next page is the same page
// would be read for ever.
func TestEventsPagesMustMoveOn(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Link", `</events?after=0&limit=1000>; rel="next"`)
		fmt.Fprint(w, `[{"id":3,"type":"plant.created","time":"2026-01-01T00:00:00Z","plant":{"id":3,"name":"a"}}]`)
	}))
	defer srv.Close()
	r := cli(t, t.TempDir(), []string{"PLANTSTORE_SERVER=" + srv.URL, "PLANTSTORE_TOKEN=pst_x"}, "events")
	if r.exit != 1 || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stderr, "not following it") || requests.Load() > 3 {
		t.Errorf("a next page that is the same page: exit %d, %d lines, %q after %d requests; want the event once, then exit 1", r.exit, strings.Count(r.stdout, "\n"), r.stderr, requests.Load())
	}
}

// plants list --all prints each page as it comes, not once every page
// has: here the second page never comes, and the first is on stdout all
// the same, before the error.
func TestListAllPrintsAsItReads(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("after") != "" {
			<-r.Context().Done() // the next page never comes
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Link", `</plants?after=2&limit=2>; rel="next"`)
		fmt.Fprint(w, `[{"id":1,"name":"Fern"},{"id":2,"name":"Moss"}]`)
	}))
	defer srv.Close()
	env := []string{"PLANTSTORE_SERVER=" + srv.URL, "PLANTSTORE_TOKEN=pst_x"}
	for _, json := range []bool{false, true} {
		args := []string{"plants", "list", "--all", "--limit", "2", "--timeout", "500ms"}
		if json {
			args = append(args, "--json")
		}
		r := cli(t, t.TempDir(), env, args...)
		if r.exit != 1 || !strings.Contains(r.stdout, "Fern") || !strings.Contains(r.stdout, "Moss") || !strings.Contains(r.stderr, "did not answer in time") {
			t.Errorf("--all, json %v, the second page never coming: exit %d, stdout %q, stderr %q; want the first page, then the error", json, r.exit, r.stdout, r.stderr)
		}
	}
}
