package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// plantstore events prints the feed a page at a time, filters it, and
// with --follow prints changes as they happen until interrupted.
func TestEventsCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := serve(t, dir)
	token := mustToken(t, dir, "--name", "cli")
	c := &eventsCLI{dir: dir, url: s.url, env: []string{"PLANTSTORE_SERVER=" + s.url, "PLANTSTORE_TOKEN=" + token}}
	c.ok(t, c.run(t, "plants", "add", "--id", "7", "--name", "Fern", "--tag", "indoor"))
	c.ok(t, c.run(t, "plants", "update", "7", "--name", "Boston fern"))
	c.ok(t, c.run(t, "plants", "delete", "7"))
	t.Run("pages", c.pages)
	t.Run("follow", c.follow)
}

// eventsCLI runs the command line against one server with one token.
type eventsCLI struct {
	dir, url string
	env      []string
}

func (c *eventsCLI) run(t *testing.T, args ...string) result {
	t.Helper()
	return cli(t, c.dir, c.env, args...)
}

// ok returns what r printed, failing the test unless it exited 0.
func (c *eventsCLI) ok(t *testing.T, r result) string {
	t.Helper()
	if r.exit != 0 {
		t.Fatalf("exit %d: %s", r.exit, r.stderr)
	}
	return r.stdout
}

// pages: the three changes a page at a time, filtered, as JSON, and the
// refused forms.
func (c *eventsCLI) pages(t *testing.T) {
	lines := strings.Split(strings.TrimRight(c.ok(t, c.run(t, "events")), "\n"), "\n")
	want := []string{
		`^1  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z  plant\.created  7  Fern  indoor$`,
		`^2  \S+  plant\.updated  7  Boston fern  indoor$`,
		`^3  \S+  plant\.deleted  7  Boston fern  indoor$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("events printed %q", lines)
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(lines[i]) {
			t.Errorf("line %d %q, want %s", i, lines[i], w)
		}
	}
	var ev feedEvent
	out := c.ok(t, c.run(t, "events", "--json", "--type", "plant.deleted"))
	if err := json.Unmarshal([]byte(out), &ev); err != nil || ev.ID != 3 || ev.Type != "plant.deleted" || ev.Plant.ID != 7 {
		t.Errorf("events --json --type plant.deleted: %q (%v)", out, err)
	}
	if out := c.ok(t, c.run(t, "events", "--after", "2")); !strings.HasPrefix(out, "3  ") || strings.Count(out, "\n") != 1 {
		t.Errorf("events --after 2: %q", out)
	}
	// After an event not yet given (a position from before a restore):
	// 410, and where to follow from after reading the plants again.
	if r := c.run(t, "events", "--after", "99"); r.exit != 1 || !strings.Contains(r.stderr, "there is no event 99") ||
		!strings.Contains(r.stderr, "plants list --all") || !strings.Contains(r.stderr, "--after 3") || strings.Contains(r.stderr, "header") ||
		!strings.Contains(r.stderr, "(HTTP 410)") || strings.Contains(r.stderr, "cannot reach") {
		t.Errorf("events --after 99: exit %d, %q; want 1, and to follow after 3", r.exit, r.stderr)
	}
	for _, bad := range [][]string{{"--after", "x"}, {"--type", "plant.eaten"}, {"extra"}} {
		if r := c.run(t, append([]string{"events"}, bad...)...); r.exit != 2 || r.stdout != "" {
			t.Errorf("events %q: exit %d, stdout %q; want 2 and nothing", bad, r.exit, r.stdout)
		}
	}
	if r := c.run(t, "events", "--after", "9223372036854775808"); r.exit != 2 || !strings.Contains(r.stderr, "beyond the largest event id") {
		t.Errorf("events --after past int64: exit %d, %q; want 2 and the range", r.exit, r.stderr)
	}
	if r := cli(t, c.dir, []string{"PLANTSTORE_SERVER=" + c.url, "PLANTSTORE_TOKEN=pst_unknown"}, "events"); r.exit != 1 || !strings.Contains(r.stderr, "401") {
		t.Errorf("events with an unknown token: exit %d, %q", r.exit, r.stderr)
	}
}

// startFollow starts the built binary's "events --follow" in dir with env
// added and args after it.
func startFollow(t *testing.T, dir string, env []string, args ...string) (*exec.Cmd, io.Reader, *strings.Builder) {
	t.Helper()
	follow := exec.Command(binary, append([]string{"events", "--follow"}, args...)...)
	follow.Dir = dir
	follow.Env = append(os.Environ(), env...)
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &strings.Builder{}
	follow.Stderr = stderr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	return follow, stdout, stderr
}

// follow: --follow, from now, prints the changes made while it runs, as
// they happen, and stops on SIGINT.
func (c *eventsCLI) follow(t *testing.T) {
	// --follow, from now: the changes made while it runs, as they happen.
	follow, stdout, stderr := startFollow(t, c.dir, c.env)
	defer follow.Process.Kill()
	printed := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			printed <- sc.Text()
		}
		close(printed)
	}()
	// It may not be connected yet: create until the first line shows.
	// Each create is a new plant, so each has its own event.
	var first string
	for id := 100; first == ""; id++ {
		c.ok(t, c.run(t, "plants", "add", "--id", strconv.Itoa(id), "--name", "Cactus"))
		select {
		case first = <-printed:
		case <-time.After(500 * time.Millisecond):
			if id > 140 {
				t.Fatalf("events --follow printed nothing in 20 s: %s", stderr.String())
			}
		}
	}
	if !regexp.MustCompile(`^\d+  \S+  plant\.created  1\d\d  Cactus  -$`).MatchString(first) {
		t.Errorf("events --follow printed %q", first)
	}
	c.ok(t, c.run(t, "plants", "add", "--id", "8", "--name", "Aloe"))
	select {
	case line := <-printed:
		for strings.Contains(line, "Cactus") { // creates that raced the connection
			line = <-printed
		}
		if !regexp.MustCompile(`^\d+  \S+  plant\.created  8  Aloe  -$`).MatchString(line) {
			t.Errorf("events --follow then printed %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("events --follow did not print a new change within 10 s")
	}
	follow.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- follow.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("events --follow on SIGINT: %v, %s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("events --follow did not stop on SIGINT")
	}
}

// serve's flags for the feed: out of range is a usage error; the stream
// caps reach the server.
func TestEventFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, bad := range [][]string{{"--event-retention", "10s"}, {"--max-streams", "0"}, {"--max-streams-per-token", "0"}} {
		if r := cli(t, dir, nil, append([]string{"serve", "--addr", "127.0.0.1:0"}, bad...)...); r.exit != 2 || !strings.Contains(r.stderr, bad[0]) {
			t.Errorf("serve %q: exit %d, %q; want 2 naming the flag", bad, r.exit, r.stderr)
		}
	}
	s := serve(t, dir, "--max-streams-per-token", "1", "--event-retention", "1h")
	token := mustToken(t, dir, "--name", "follower", "--scope", "plants:read")
	open := func() *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", s.url+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if first := open(); first.StatusCode != 200 {
		t.Fatalf("a first stream: %d", first.StatusCode)
	}
	if second := open(); second.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a second stream of the token with --max-streams-per-token 1: %d, want 429", second.StatusCode)
	}
}

// --timeout's help says what it means to a followed stream only where
// there is one to follow.
func TestTimeoutHelp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		args    []string
		streams bool
	}{{[]string{"events", "--help"}, true}, {[]string{"plants", "get", "--help"}, false}, {[]string{"plants", "list", "--help"}, false}} {
		r := cli(t, dir, nil, c.args...)
		if r.exit != 0 || !strings.Contains(r.stdout, "how long each request may take") {
			t.Errorf("%q: exit %d, --timeout not explained:\n%s", c.args, r.exit, r.stdout)
		}
		if got := strings.Contains(r.stdout, "event stream"); got != c.streams {
			t.Errorf("%q: mentions an event stream %v, want %v:\n%s", c.args, got, c.streams, r.stdout)
		}
	}
}

// feedEvent is what a test reads of one event of the change feed, as
// GET /events and "events --json" give it.
type feedEvent struct {
	ID    int64  `json:"id"`
	Type  string `json:"type"`
	Plant struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	} `json:"plant"`
}

// A change-feed row the server cannot read (a store damaged by hand, say)
// is the service's fault: GET /events answers 500 with the contract's
// Error body and no detail of the store, and the pages that do not reach
// it are still served.
func TestUnreadableEventBatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := serve(t, dir)
	token := mustToken(t, dir, "--name", "feed")
	for _, body := range []string{`{"id": 1, "name": "Fern"}`, `{"id": 2, "name": "Moss"}`} {
		if status, got := upgradeRequest(t, "POST", s.url+"/plants", token, body); status != 200 {
			t.Fatalf("POST /plants %s: %d %s", body, status, got)
		}
	}
	raw, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "plantstore.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if res, err := raw.Exec(`UPDATE event_batches SET changes = '[{"type":' WHERE last = 1`); err != nil {
		t.Fatal(err)
	} else if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("%d batches end at event 1, want 1 (one create a batch)", n)
	}

	status, body := upgradeRequest(t, "GET", s.url+"/events", token, "")
	var e struct {
		Error   int    `json:"error"`
		Message string `json:"message"`
	}
	if status != 500 || json.Unmarshal([]byte(body), &e) != nil || e.Error != 500 || e.Message == "" ||
		strings.Contains(body, "event batch") || strings.Contains(body, "sqlite") {
		t.Errorf("GET /events over the damaged row: %d %s; want 500 and an Error body naming nothing of the store", status, body)
	}
	status, body = upgradeRequest(t, "GET", s.url+"/events?after=1", token, "")
	var events []feedEvent
	if status != 200 || json.Unmarshal([]byte(body), &events) != nil || len(events) != 1 || events[0].ID != 2 || events[0].Plant.ID != 2 {
		t.Errorf("GET /events?after=1: %d %s; want the create of plant 2", status, body)
	}
}

// events --follow ends, exit status 1, on an answer that reconnecting
// would only get again, and says why: a server that redirects to another
// origin (here, moved to another port), a bad token, a token without
// plants:read, a wrong path, a certificate not trusted (no --ca-cert), an
// https URL at a server of plain HTTP, a malformed event, an event longer
// than the client reads.
func TestEventsFollowEndsOnRefusal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := serve(t, dir)
	reader := mustToken(t, dir, "--name", "reader", "--scope", "plants:read")
	writer := mustToken(t, dir, "--name", "writer", "--scope", "plants:write")
	moved := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s.url+r.URL.RequestURI(), http.StatusPermanentRedirect)
	}))
	defer moved.Close()
	untrusted := httptest.NewUnstartedServer(http.NotFoundHandler())
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	untrusted.StartTLS()
	defer untrusted.Close()
	malformed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "id: 4\ndata: {\"id\": 4,\n\n")
	}))
	defer malformed.Close()
	tooLong := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "id: 4\ndata: {\"id\": 4, \"type\": \""+strings.Repeat("x", 1<<20)+"\"}\n\n")
	}))
	defer tooLong.Close()
	plainAsHTTPS := "https://" + strings.TrimPrefix(s.url, "http://")
	for _, tc := range []struct {
		name, server, token string
		says                []string
	}{
		{"redirect", moved.URL, reader, []string{"not following a redirect from " + moved.URL + "/events?limit=1 to " + s.url + "/events?limit=1",
			"the token is not sent to another origin than " + moved.URL}},
		{"bad token", s.url, "pst_unknown", []string{"(HTTP 401)"}},
		{"no plants:read", s.url, writer, []string{"plants:read", "(HTTP 403)"}},
		{"wrong path", s.url + "/v2", reader, []string{"(HTTP 404)"}},
		{"untrusted certificate", untrusted.URL, reader, []string{"certificate signed by unknown authority",
			"the certificate of the server at " + untrusted.URL + " does not verify", "give its certificate with --ca-cert FILE"}},
		{"plain HTTP", plainAsHTTPS, reader, []string{"the server at " + plainAsHTTPS + " answered in plain HTTP, not HTTPS"}},
		{"malformed event", malformed.URL, reader, []string{"the server sent a malformed event 4: "}},
		{"event too long", tooLong.URL, reader, []string{"plantstore: the server sent an event longer than 1 MiB (event 4)\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			follow := exec.CommandContext(ctx, binary, "events", "--follow")
			follow.Dir = dir
			follow.Env = append(os.Environ(), "PLANTSTORE_SERVER="+tc.server, "PLANTSTORE_TOKEN="+tc.token)
			var stderr strings.Builder
			follow.Stderr = &stderr
			err := follow.Run()
			if ctx.Err() != nil {
				t.Fatalf("events --follow still ran after 20 s:\n%s", stderr.String())
			}
			exit, _ := errors.AsType[*exec.ExitError](err)
			if exit == nil || exit.ExitCode() != 1 {
				t.Errorf("events --follow: %v; want exit status 1", err)
			}
			got := stderr.String()
			for _, s := range tc.says {
				if !strings.Contains(got, s) {
					t.Errorf("stderr %q does not say %q", got, s)
				}
			}
			if strings.Contains(got, "reconnecting") || strings.Contains(got, "cannot reach") || strings.Count(got, "\n") != 1 {
				t.Errorf("stderr %q; want one line, the reason", got)
			}
		})
	}
	// Any command says a refused redirect the same way: the server was
	// reached, and the client itself declined to follow.
	r := cli(t, dir, []string{"PLANTSTORE_SERVER=" + moved.URL, "PLANTSTORE_TOKEN=" + reader}, "plants", "get", "1")
	if r.exit != 1 || !strings.Contains(r.stderr, "not following a redirect from "+moved.URL+"/plants/1") || strings.Contains(r.stderr, "cannot reach") {
		t.Errorf("plants get behind a redirect to another origin: exit %d, stderr %q", r.exit, r.stderr)
	}
	// An https URL at a server of plain HTTP too.
	r = cli(t, dir, []string{"PLANTSTORE_SERVER=" + plainAsHTTPS, "PLANTSTORE_TOKEN=" + reader}, "plants", "get", "1")
	if want := "plantstore: the server at " + plainAsHTTPS + " answered in plain HTTP, not HTTPS: use an http:// --server, or serve it over TLS\n"; r.exit != 1 || r.stderr != want {
		t.Errorf("plants get of an https URL at a plain server: exit %d, stderr %q; want exit 1, %q", r.exit, r.stderr, want)
	}
}

// events --follow reconnects after a refusal for now (too many streams,
// a server restarting behind a proxy), then prints the changes. It says
// how long it waits: at least as long as a Retry-After asks (1 s, up to
// a quarter more), else its own pause, doubled after each failure (1 s),
// drawn from its upper half.
func TestEventsFollowRetriesRefusalsForNow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := serve(t, dir)
	token := mustToken(t, dir, "--name", "reader")
	target, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	var requests atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch requests.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.WriteHeader(http.StatusBadGateway)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	defer front.Close()
	c := &eventsCLI{dir: dir, url: s.url, env: []string{"PLANTSTORE_SERVER=" + s.url, "PLANTSTORE_TOKEN=" + token}}

	follow, stdout, stderr := startFollow(t, dir, []string{"PLANTSTORE_SERVER=" + front.URL, "PLANTSTORE_TOKEN=" + token}, "--after", "0")
	defer follow.Process.Kill() // on a failed test
	c.ok(t, c.run(t, "plants", "add", "--id", "9", "--name", "Ivy"))
	printed := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		printed <- line
	}()
	select {
	case line := <-printed:
		if !regexp.MustCompile(`^1  \S+  plant\.created  9  Ivy  -\n$`).MatchString(line) {
			t.Errorf("events --follow printed %q; stderr:\n%s", line, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("events --follow printed nothing in 20 s; stderr:\n%s", stderr.String())
	}
	follow.Process.Kill()
	follow.Wait()
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	said := regexp.MustCompile(`\(HTTP (\d+)\); reconnecting in ([\d.]+) s$`)
	for i, want := range []struct {
		status    string
		low, high float64 // seconds, as printed to the tenth
	}{{"429", 1, 1.3}, {"502", 0.5, 1}} {
		var m []string
		if len(lines) == 2 {
			m = said.FindStringSubmatch(lines[i])
		}
		if m == nil || m[1] != want.status {
			t.Errorf("stderr %q; want a line for each refusal, each saying it reconnects and when", lines)
			break
		}
		if in, _ := strconv.ParseFloat(m[2], 64); in < want.low || in > want.high {
			t.Errorf("%q: want %v s to %v s", lines[i], want.low, want.high)
		}
	}
}
