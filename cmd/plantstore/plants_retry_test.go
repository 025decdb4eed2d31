package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/plantstore/plantstore/client"
)

// The plants commands wait out a 429 whose Retry-After is short, and
// retry: against the real server, with a rate limit of one request a
// second.
func TestPlantsRetryThrottled(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "cli")
	s := serve(t, dir, "--rate-limit", "1", "--rate-burst", "1")
	env := []string{"PLANTSTORE_SERVER=" + s.url, "PLANTSTORE_TOKEN=" + token}
	if r := cli(t, dir, env, "plants", "add", "--id", "1", "--name", "Fern"); r.exit != 0 {
		t.Fatalf("add: exit %d, %s", r.exit, r.stderr)
	}
	// At once: the token's bucket is empty (a list takes its one
	// request), the server answers the get 429 with Retry-After: 1, and
	// the command waits and gets the plant. On a slow machine the bucket
	// may refill before the command's first request: then try again.
	throttled := `"path":"/plants/1","status":429`
	for attempt := 1; ; attempt++ {
		req, _ := http.NewRequest("GET", s.url+"/plants", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		start := time.Now()
		if r := cli(t, dir, env, "plants", "get", "1"); r.exit != 0 || !strings.Contains(r.stdout, "Fern") {
			t.Fatalf("get right after: exit %d, %q, %s", r.exit, r.stdout, r.stderr)
		}
		took := time.Since(start)
		deadline := time.Now().Add(2 * time.Second) // the log is copied as it comes
		for !strings.Contains(s.logs.String(), throttled) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if strings.Contains(s.logs.String(), throttled) {
			if took < 500*time.Millisecond {
				t.Errorf("the get took %v: it did not wait for the Retry-After", took)
			}
			return
		}
		if attempt == 5 {
			t.Fatalf("five gets right after a list were never answered 429:\n%s", s.logs)
		}
	}
}

// A 429 that asks for a longer wait than the command waits says, once,
// how many seconds to wait, and is not retried. The real server's 429s on
// the plant routes ask for 5 s at most (a throttled address is told when
// a valid token new to the server is known), so a stand-in answers as a
// proxy's or gateway's limit might: five minutes.
func TestPlantsSayRetryAfter(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "300")
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"error":429,"message":"too many requests from this address"}`))
	}))
	defer srv.Close()
	env := []string{"PLANTSTORE_SERVER=" + srv.URL, "PLANTSTORE_TOKEN=pst_notatoken"}
	r := cli(t, t.TempDir(), env, "plants", "list")
	want := regexp.MustCompile(`^plantstore: too many requests from this address \(HTTP 429\); retry after (\d+) s\n$`)
	m := want.FindStringSubmatch(r.stderr)
	if r.exit != 1 || m == nil {
		t.Fatalf("a 429 asking for 300 s: exit %d, stderr %q; want one line matching %s", r.exit, r.stderr, want)
	}
	if m[1] != "300" {
		t.Errorf("retry after %s s; the server asked for 300", m[1])
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests: a Retry-After of 300 s is beyond what the command waits, want 1", n)
	}
}

// The plants commands retry a dropped connection (here a create: sent
// again, it is a replay) and give up after 3 retries.
func TestPlantsRetryDroppedConnection(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "cli")
	s := serve(t, dir)
	var drops atomic.Int32
	drops.Store(2)
	front := inFront(t, s.url, func(w http.ResponseWriter, _ *http.Request) bool {
		if drops.Add(-1) < 0 {
			return false
		}
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
		return true
	})
	env := []string{"PLANTSTORE_SERVER=" + front, "PLANTSTORE_TOKEN=" + token}
	if r := cli(t, dir, env, "plants", "add", "--id", "4", "--name", "Ivy"); r.exit != 0 || !strings.Contains(r.stdout, "Ivy") {
		t.Fatalf("add through two dropped connections: exit %d, %q, %s", r.exit, r.stdout, r.stderr)
	}
	drops.Store(4)
	if r := cli(t, dir, env, "plants", "get", "4"); r.exit != 1 || !strings.Contains(r.stderr, "cannot reach the server") {
		t.Errorf("get through four dropped connections: exit %d, %q; want the error after 3 retries", r.exit, r.stderr)
	}
	if n := drops.Load(); n != 0 {
		t.Errorf("%d drops left: want 4 attempts, the first and 3 retries", n)
	}
}

// A delete whose answer is lost after it took effect: the retry finds
// no plant (404), and the command says the plant is gone, exit 0, not
// that it was not found. A plant that was never there is still a 404.
func TestPlantsDeleteAnswerLost(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "cli")
	s := serve(t, dir)
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	var lose atomic.Bool
	lose.Store(true)
	front := inFront(t, s.url, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodDelete || !lose.CompareAndSwap(true, false) {
			return false
		}
		// Forwarded, then the answer dropped on the way back.
		proxy.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
		return true
	})
	env := []string{"PLANTSTORE_SERVER=" + front, "PLANTSTORE_TOKEN=" + token}
	if r := cli(t, dir, env, "plants", "add", "--id", "5", "--name", "Ivy"); r.exit != 0 {
		t.Fatalf("add: exit %d, %s", r.exit, r.stderr)
	}
	r := cli(t, dir, env, "plants", "delete", "5")
	if r.exit != 0 || !strings.Contains(r.stderr, "plant 5 is gone: an earlier attempt, whose answer was lost, may have deleted it") {
		t.Errorf("delete whose answer was lost: exit %d, %q; want 0 and that the plant is gone", r.exit, r.stderr)
	}
	if lose.Load() {
		t.Error("the proxy lost no answer: the test proved nothing")
	}
	if r := cli(t, dir, env, "plants", "get", "5"); r.exit != 1 || !strings.Contains(r.stderr, "HTTP 404") {
		t.Errorf("get after the delete: exit %d, %q; want 404", r.exit, r.stderr)
	}
	if r := cli(t, dir, env, "plants", "delete", "6"); r.exit != 1 || !strings.Contains(r.stderr, "plant 6 not found (HTTP 404)") {
		t.Errorf("delete of a plant never there: exit %d, %q; want 404, exit 1", r.exit, r.stderr)
	}
	// A 429 refused the first attempt before anything was done: the
	// retry's 404 is the plant's absence, not a lost answer's success.
	var refuse atomic.Bool
	refuse.Store(true)
	throttled := inFront(t, s.url, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodDelete || !refuse.CompareAndSwap(true, false) {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":429,"message":"slow down"}`)
		return true
	})
	env = []string{"PLANTSTORE_SERVER=" + throttled, "PLANTSTORE_TOKEN=" + token}
	if r := cli(t, dir, env, "plants", "delete", "8"); r.exit != 1 || !strings.Contains(r.stderr, "plant 8 not found (HTTP 404)") || refuse.Load() {
		t.Errorf("delete of a plant never there, after a 429: exit %d, %q; want 404, exit 1", r.exit, r.stderr)
	}
}

// A listing that fails before its first page prints nothing on standard
// output: a table's header alone would read as an empty listing.
func TestPlantsListAllFailsBeforeAnyPage(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	env := []string{"PLANTSTORE_SERVER=http://" + addr, "PLANTSTORE_TOKEN=pst_notused"}
	for _, args := range [][]string{{"plants", "list", "--all"}, {"plants", "list", "--all", "--json"}, {"plants", "list"}} {
		r := cli(t, dir, env, args...)
		if r.exit != 1 || r.stdout != "" || !strings.Contains(r.stderr, "cannot reach the server") {
			t.Errorf("%v with no server: exit %d, stdout %q, stderr %q; want exit 1 and nothing on stdout", args, r.exit, r.stdout, r.stderr)
		}
	}
}

// --ca-cert (or PLANTSTORE_CA_CERT) trusts a private CA for an https
// server, for plants and events; without it, the server's certificate is
// refused.
func TestPlantsCACert(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "cli")
	certFile, keyFile, _ := selfSigned(t)
	s := serve(t, dir, "--tls-cert", certFile, "--tls-key", keyFile)
	server := "https://" + strings.TrimPrefix(s.url, "http://")
	env := []string{"PLANTSTORE_SERVER=" + server, "PLANTSTORE_TOKEN=" + token}

	if r := cli(t, dir, env, "plants", "add", "--id", "1", "--name", "Fern", "--ca-cert", certFile); r.exit != 0 {
		t.Fatalf("add --ca-cert: exit %d, %s", r.exit, r.stderr)
	}
	if r := cli(t, dir, append(env, "PLANTSTORE_CA_CERT="+certFile), "plants", "get", "1"); r.exit != 0 || !strings.Contains(r.stdout, "Fern") {
		t.Errorf("get with PLANTSTORE_CA_CERT: exit %d, %q, %s", r.exit, r.stdout, r.stderr)
	}
	if r := cli(t, dir, env, "plants", "get", "1"); r.exit != 1 || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("get without the CA: exit %d, %s; want a certificate error", r.exit, r.stderr)
	}
	// events talks to the server as plants does.
	if r := cli(t, dir, env, "events", "--ca-cert", certFile); r.exit != 0 || !strings.Contains(r.stdout, "plant.created") {
		t.Errorf("events --ca-cert: exit %d, %q, %s", r.exit, r.stdout, r.stderr)
	}
	if r := cli(t, dir, append(env, "PLANTSTORE_CA_CERT="+certFile), "events"); r.exit != 0 || !strings.Contains(r.stdout, "plant.created") {
		t.Errorf("events with PLANTSTORE_CA_CERT: exit %d, %q, %s", r.exit, r.stdout, r.stderr)
	}
	if r := cli(t, dir, env, "events"); r.exit != 1 || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("events without the CA: exit %d, %s; want a certificate error", r.exit, r.stderr)
	}
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	if r := cli(t, dir, env, "plants", "get", "1", "--ca-cert", notPEM); r.exit != 2 || !strings.Contains(r.stderr, "no PEM certificate") {
		t.Errorf("--ca-cert of a file without a certificate: exit %d, %s", r.exit, r.stderr)
	}
}

// An update of one field reads the plant and writes it back on the
// condition that it has not changed; when another writer changed it in
// between, it reads again, so neither change is lost.
func TestPlantsUpdateOneFieldKeepsConcurrentChange(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "cli")
	s := serve(t, dir)
	direct, err := client.New(s.url, token)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := direct.Create(ctx, client.Plant{ID: 1, Name: "Fern", Tag: client.Tag("indoor")}); err != nil {
		t.Fatal(err)
	}
	// In front of the server: before the first PUT goes through, another
	// writer renames the plant.
	var once sync.Once
	var puts atomic.Int32
	front := inFront(t, s.url, func(_ http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPut {
			puts.Add(1)
			once.Do(func() {
				if _, err := direct.Update(ctx, client.Plant{ID: 1, Name: "Boston fern", Tag: client.Tag("indoor")}); err != nil {
					t.Error(err)
				}
			})
		}
		return false
	})
	c, err := client.New(front, token)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := updatePlant(ctx, c, 1, "", client.Tag("shade"), false, "")
	if err != nil || p.Name != "Boston fern" || p.Tag == nil || *p.Tag != "shade" {
		t.Fatalf("updatePlant = %+v, %v; want the other writer's name with the new tag", p, err)
	}
	if n := puts.Load(); n != 2 {
		t.Errorf("%d PUTs, want 2: one refused (412), one after reading again", n)
	}
}

// inFront serves the server at backend through a proxy, and returns the
// proxy's URL. intercept sees each request first, and answers it itself
// when it returns true.
func inFront(t *testing.T, backend string, intercept func(w http.ResponseWriter, r *http.Request) bool) string {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !intercept(w, r) {
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(front.Close)
	return front.URL
}

// A command that a signal cuts short exits as a shell reports a process
// that signal ended, 128 + its number, and says why; serve and events
// --follow, stopped by a signal by design, exit 0 (their own tests).
func TestInterruptedExitStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sig  syscall.Signal
		exit int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		arrived := make(chan struct{}, 1)
		release := make(chan struct{})
		silent := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			arrived <- struct{}{}
			<-release // never answers while the command waits
		}))
		cmd := exec.Command(binary, "plants", "list", "--server", silent.URL, "--token", "pst_"+strings.Repeat("a", 38))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-arrived:
		case <-time.After(30 * time.Second):
			t.Fatal("the request never reached the server")
		}
		cmd.Process.Signal(c.sig)
		cmd.Wait()
		close(release)
		silent.Close()
		if got := cmd.ProcessState.ExitCode(); got != c.exit || !strings.Contains(stderr.String(), "interrupted") {
			t.Errorf("plants list cut short by %v: exit %d, %q; want %d and why", c.sig, got, stderr.String(), c.exit)
		}
	}
}
