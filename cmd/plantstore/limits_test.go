package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
)

// The request limits, through the built binary: each flag reaches the
// server, and each refusal is the contract's Error.

// limRequest sends a request through the contract-checking client; only
// the answer's status and headers are kept with its body.
func limRequest(t *testing.T, client *http.Client, method, url, token, body string) (*http.Response, []byte) {
	t.Helper()
	status, header, answer := call(t, client, method, url, token, body)
	return &http.Response{StatusCode: status, Header: header}, answer
}

// limWantError checks status, the Error body (the client has checked its
// shape against the contract) and, for 429 and 503, a Retry-After of
// whole seconds, at least 1. It returns the message.
func limWantError(t *testing.T, resp *http.Response, body []byte, status int) string {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, body)
	}
	var e struct {
		Error   int    `json:"error"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error != status || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d with %q, body %s: want the Error body", status, resp.Header.Get("Content-Type"), body)
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || n < 1 {
			t.Errorf("%d with Retry-After %q, want whole seconds, at least 1", status, resp.Header.Get("Retry-After"))
		}
	}
	return e.Message
}

// limRaw reads one answer to request off conn and checks it against the
// contract.
func limRaw(t *testing.T, conn net.Conn, method, path string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: no answer: %v", method, path, err)
	}
	req, _ := http.NewRequest(method, "http://"+conn.RemoteAddr().String()+path, nil)
	return resp, apitest.CheckRaw(t, req, resp)
}

func limDial(t *testing.T, url string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// limAwaitLog waits for want in the server's log, which is written in
// batches.
func limAwaitLog(t *testing.T, s *server, want string) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); !strings.Contains(s.logs.String(), want); {
		if time.Now().After(deadline) {
			t.Errorf("no %s in the log:\n%s", want, s.logs)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveRefused runs serve with args and env, which it must refuse as a
// usage error, without ever listening.
func serveRefused(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"serve", "--addr", "127.0.0.1:0", "--db", t.TempDir() + "/x.db"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	exit, ok := errors.AsType[*exec.ExitError](err)
	if !ok || exit.ExitCode() != 2 {
		t.Errorf("serve %q with %q: %v, want exit 2\n%s", args, env, err, out)
	}
	return string(out)
}

func TestLimitFlags(t *testing.T) {
	r := cli(t, t.TempDir(), nil, "serve", "--help")
	for _, want := range []string{
		"-max-in-flight", "PLANTSTORE_MAX_IN_FLIGHT", "-rate-limit", "PLANTSTORE_RATE_LIMIT",
		"-rate-burst", "PLANTSTORE_RATE_BURST", "-auth-failure-limit", "PLANTSTORE_AUTH_FAILURE_LIMIT",
		"-auth-failure-window", "PLANTSTORE_AUTH_FAILURE_WINDOW", "-trusted-proxies", "PLANTSTORE_TRUSTED_PROXIES",
		"-max-connections", "PLANTSTORE_MAX_CONNECTIONS",
		"-max-connections-per-address", "PLANTSTORE_MAX_CONNECTIONS_PER_ADDRESS",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("serve --help does not mention %s", want)
		}
	}
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--max-in-flight", "-1"}, "must not be negative"},
		{[]string{"PLANTSTORE_RATE_LIMIT=-5"}, nil, "PLANTSTORE_RATE_LIMIT"},
		{nil, []string{"--rate-limit", "fast"}, "not an integer"},
		{nil, []string{"--rate-burst", "-1"}, "must not be negative"},
		{nil, []string{"--rate-burst", "10"}, "--rate-burst needs --rate-limit"},
		{nil, []string{"--auth-failure-limit", "-3"}, "must not be negative"},
		{nil, []string{"--auth-failure-window", "0s"}, "must be positive"},
		{[]string{"PLANTSTORE_TRUSTED_PROXIES=10.0.0.0/8,proxy.internal"}, nil, `"proxy.internal"`},
		{nil, []string{"--max-body-bytes", "0"}, "--max-body-bytes 0: want 1 or more"},
		{[]string{"PLANTSTORE_MAX_HEADER_BYTES=10"}, nil, "--max-header-bytes (from PLANTSTORE_MAX_HEADER_BYTES) 10: want 1024 or more"},
		{nil, []string{"--max-connections", "-1"}, "--max-connections: must not be negative"},
		{nil, []string{"--max-connections-per-address", "-1"}, "--max-connections-per-address: must not be negative"},
	} {
		if out := serveRefused(t, tc.env, tc.args...); !strings.Contains(out, tc.want) {
			t.Errorf("serve %q with %q says\n%s\nwhich does not mention %q", tc.args, tc.env, out, tc.want)
		}
	}
}

// With --max-connections 2 and two kept-alive connections open (one the
// lean server keeps, one it handed to net/http), a third connection's
// request waits, unanswered, until one of them closes; whichever server
// closed it, its place is given back.
func TestMaxConnections(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "conns")
	s := serve(t, dir, "--max-connections", "2")
	ask := func(conn net.Conn, path string) {
		t.Helper()
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", path, token)
	}
	lean, handed := limDial(t, s.url), limDial(t, s.url)
	ask(lean, "/plants/1")  // the lean server's (404)
	ask(handed, "/healthz") // net/http's
	if !answered(t, lean, "/plants/1", 5*time.Second) || !answered(t, handed, "/healthz", 5*time.Second) {
		t.Fatal("the first two connections were not served")
	}
	third := limDial(t, s.url)
	ask(third, "/healthz")
	if answered(t, third, "/healthz", 500*time.Millisecond) {
		t.Fatal("a third connection was served with --max-connections 2 and two open")
	}
	limAwaitLog(t, s, "connection limit reached")
	lean.Close()
	if !answered(t, third, "/healthz", 5*time.Second) {
		t.Fatal("the third connection was still waiting after the lean server's connection closed")
	}
	fourth := limDial(t, s.url)
	ask(fourth, "/plants/1")
	if answered(t, fourth, "/plants/1", 500*time.Millisecond) {
		t.Fatal("a fourth connection was served with two open")
	}
	handed.Close()
	if !answered(t, fourth, "/plants/1", 5*time.Second) {
		t.Fatal("the fourth connection was still waiting after net/http's connection closed")
	}
	// At the cap, with a connection waiting, the server still stops at
	// once: the wait for a place ends with the listener.
	limDial(t, s.url)
	begin := time.Now()
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		if err != nil {
			t.Errorf("serve at the connection cap stopped with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve at the connection cap did not stop")
	}
	if took := time.Since(begin); took > 3*time.Second {
		t.Errorf("serve at the connection cap took %v to stop", took)
	}
}

// With --max-in-flight 2 and two creates held in flight by slow bodies,
// the next plant operation gets 503 at once, while /healthz still answers;
// once one finishes, requests get through again.
func TestMaxInFlight(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "busy")
	// One token here: its own cap must not come first.
	s := serve(t, dir, "--max-in-flight", "2", "--max-in-flight-per-token", "8", "--body-read-timeout", "30s")
	client := apitest.Client(t)

	hold := func(id int) net.Conn {
		body := fmt.Sprintf(`{"id":%d,"name":"held"}`, id)
		conn := limDial(t, s.url)
		fmt.Fprintf(conn, "POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			token, len(body), body[:5])
		return conn
	}
	// refused tells a held request that a probe beat to its place while
	// the server had not yet read its headers. Its 503 does not arrive
	// (Go's server first reads the rest of the body), but it is logged.
	refused := func(conn net.Conn) bool {
		return strings.Contains(s.logs.String(), `"remote":"`+conn.LocalAddr().String()+`","limit":"in_flight"`)
	}
	held := []net.Conn{hold(1), hold(2)}
	// The held requests are in flight once the server has read their
	// headers, which it does in its own time: probe until one is refused,
	// holding again any held request that a probe beat to its place.
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, body := limRequest(t, client, "GET", s.url+"/plants", token, "")
		if resp.StatusCode == http.StatusServiceUnavailable {
			limWantError(t, resp, body, http.StatusServiceUnavailable)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with two requests held and --max-in-flight 2, a third still gets %d\n%s", resp.StatusCode, s.logs)
		}
		for i, conn := range held {
			if refused(conn) {
				conn.Close()
				held[i] = hold(i + 1)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	var slowest time.Duration
	for _, op := range []struct{ method, path, body string }{
		{"GET", "/plants", ""}, {"POST", "/plants", `{"id":9,"name":"a"}`}, {"GET", "/plants/1", ""},
		{"PUT", "/plants/1", `{"name":"b"}`}, {"DELETE", "/plants/1", ""},
	} {
		begin := time.Now()
		resp, body := limRequest(t, client, op.method, s.url+op.path, token, op.body)
		slowest = max(slowest, time.Since(begin))
		limWantError(t, resp, body, http.StatusServiceUnavailable)
	}
	t.Logf("refusals answered within %v", slowest)
	if slowest > 500*time.Millisecond {
		t.Errorf("a refusal took %v: requests queue instead of being refused", slowest)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, body := limRequest(t, client, "GET", s.url+path, "", ""); resp.StatusCode != 200 {
			t.Errorf("%s while the cap is reached: %d %s", path, resp.StatusCode, body)
		}
	}

	io.WriteString(held[0], `{"id":1,"name":"held"}`[5:])
	held[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, body := limRaw(t, held[0], "POST", "/plants"); resp.StatusCode != 200 {
		t.Fatalf("the held create: %d %s", resp.StatusCode, body)
	}
	if resp, body := limRequest(t, client, "GET", s.url+"/plants/1", token, ""); resp.StatusCode != 200 {
		t.Errorf("with a place free: %d %s", resp.StatusCode, body)
	}
	limAwaitLog(t, s, `"limit":"in_flight"`)
	if strings.Contains(s.logs.String(), `"level":"ERROR"`) {
		t.Errorf("a refusal logged as an error:\n%s", s.logs)
	}
}

// One token cannot take every slot in flight: with --max-in-flight 8 (so
// two a token), a token's eight slow bodies hold two slots, its other
// requests are refused with 429, and another token is served.
func TestOneTokenCannotTakeEverySlot(t *testing.T) {
	dir := t.TempDir()
	greedy := mustToken(t, dir, "--name", "greedy")
	other := mustToken(t, dir, "--name", "other")
	s := serve(t, dir, "--max-in-flight", "8", "--body-read-timeout", "30s")
	client := apitest.Client(t)
	for i := range 8 {
		conn := limDial(t, s.url)
		body := fmt.Sprintf(`{"id":%d,"name":"slow"}`, 100+i)
		fmt.Fprintf(conn, "POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			greedy, len(body), body[:5])
	}
	// The server takes the eight in its own time: wait until six are
	// refused, so two hold their slots.
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(s.logs.String(), `"limit":"token_in_flight"`) < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("one token's eight slow bodies: %d refused, want 6\n%s", strings.Count(s.logs.String(), `"limit":"token_in_flight"`), s.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, body := limRequest(t, client, "GET", s.url+"/plants", greedy, "")
	limWantError(t, resp, body, http.StatusTooManyRequests) // with its Retry-After
	for i := range 5 {
		if resp, body := limRequest(t, client, "POST", s.url+"/plants", other, fmt.Sprintf(`{"id":%d,"name":"served"}`, i)); resp.StatusCode != 200 {
			t.Fatalf("another token while one holds its slots: %d %s", resp.StatusCode, body)
		}
	}
}

// --rate-limit and --rate-burst (here from its variable) hold each token
// to its allowance.
func TestRateLimit(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "eager")
	other := mustToken(t, dir, "--name", "calm")
	t.Setenv("PLANTSTORE_RATE_BURST", "3")
	s := serve(t, dir, "--rate-limit", "1")
	client := apitest.Client(t)
	for i := range 3 {
		if resp, body := limRequest(t, client, "GET", s.url+"/plants", token, ""); resp.StatusCode != 200 {
			t.Fatalf("request %d of a burst of 3: %d %s", i+1, resp.StatusCode, body)
		}
	}
	resp, body := limRequest(t, client, "GET", s.url+"/plants", token, "")
	limWantError(t, resp, body, http.StatusTooManyRequests)
	if resp, body := limRequest(t, client, "GET", s.url+"/plants", other, ""); resp.StatusCode != 200 {
		t.Errorf("another token: %d %s", resp.StatusCode, body)
	}
	limAwaitLog(t, s, `"token":"eager","remote":`)
	limAwaitLog(t, s, `"limit":"token_rate"`)
	if strings.Contains(s.logs.String(), token) {
		t.Error("the token's secret is in the log")
	}
}

// By default an address gets 10 refused tokens a minute; the 11th guess
// gets 429 without being checked, while a valid token made before the
// server started (on its roster of active tokens) is served.
func TestAuthFailureLimitByDefault(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "valid")
	s := serve(t, dir)
	client := apitest.Client(t)
	guess := func() (*http.Response, []byte) {
		// Well-formed, so each would be looked up in the store.
		return limRequest(t, client, "GET", s.url+"/plants/1", plantstore.NewToken(), "")
	}
	for i := range 10 {
		resp, body := guess()
		if resp.StatusCode != 401 {
			t.Fatalf("guess %d: %d %s, want 401", i+1, resp.StatusCode, body)
		}
	}
	resp, body := guess()
	limWantError(t, resp, body, http.StatusTooManyRequests)
	// A token is told to come back when the roster of active tokens is
	// read again (every 5 s), by when a valid one made since is known.
	if got, _ := strconv.Atoi(resp.Header.Get("Retry-After")); got < 1 || got > 5 {
		t.Errorf("Retry-After %q, want 1 to 5 s (the roster's next reading)", resp.Header.Get("Retry-After"))
	}
	// The probes and documents take no token: a readiness probe behind
	// the same address as the guesser is answered.
	if resp, body := limRequest(t, client, "GET", s.url+"/readyz", "", ""); resp.StatusCode != 200 {
		t.Errorf("/readyz from the throttled address: %d %s", resp.StatusCode, body)
	}
	if resp, body := limRequest(t, client, "GET", s.url+"/plants", token, ""); resp.StatusCode != 200 {
		t.Errorf("a valid token from the throttled address: %d %s", resp.StatusCode, body)
	}
	if resp, body := limRequest(t, client, "GET", s.url+"/healthz", "", ""); resp.StatusCode != 200 {
		t.Errorf("/healthz: %d %s", resp.StatusCode, body)
	}
	limAwaitLog(t, s, `"msg":"client address throttled after repeated authentication failures"`)
	limAwaitLog(t, s, `"address":"127.0.0.1"`)
	limAwaitLog(t, s, `"limit":"auth_failures"`)
}

// slowBodyGets408 sends on conn a create whose body stops short of its
// Content-Length, and checks it is answered 408 with the Error body within
// twice the server's --read-timeout of 2 s.
func slowBodyGets408(t *testing.T, conn net.Conn, token string, id int64) {
	t.Helper()
	begin := time.Now()
	fmt.Fprintf(conn, "POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":%d,", token, id)
	resp, body := limRaw(t, conn, "POST", "/plants")
	limWantError(t, resp, body, http.StatusRequestTimeout)
	if took := time.Since(begin); took > 4*time.Second {
		t.Errorf("a slow body was answered after %v, with --read-timeout 2s", took)
	}
}

// Slow and oversized clients, with the limits set low by flags: each is
// cut off or refused with the Error body, and the server serves others
// meanwhile. With the defaults (5 s, 30 s, 64 KiB, 16 KiB) every case
// here would get through or wait.
func TestSlowAndOversizedClients(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "me")
	s := serve(t, dir, "--read-header-timeout", "1s", "--read-timeout", "2s", "--write-timeout", "2s",
		"--max-body-bytes", "1024", "--max-header-bytes", "2048")
	client := apitest.Client(t)

	t.Run("slowloris", func(t *testing.T) { slowlorisBesideOthers(t, client, s.url, token) })

	t.Run("slow body", func(t *testing.T) {
		conn := limDial(t, s.url)
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		slowBodyGets408(t, conn, token, 1)
	})

	// The same on a kept-alive connection that has served a request,
	// whose deadlines internal/http1 moves only when it must.
	t.Run("slow body of a later request", func(t *testing.T) {
		conn := limDial(t, s.url)
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", token)
		if resp, body := limRaw(t, conn, "GET", "/plants"); resp.StatusCode != http.StatusOK {
			t.Fatalf("the first request: %d %s", resp.StatusCode, body)
		}
		slowBodyGets408(t, conn, token, 3)
	})

	t.Run("oversized body", func(t *testing.T) {
		status, body := create(t, client, s.url, token, `{"id":2,"name":"big","pad":"`+strings.Repeat("x", 2000)+`"}`)
		var e struct{ Message string }
		json.Unmarshal([]byte(body), &e)
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(e.Message, "1024 bytes") {
			t.Errorf("a body of 2 KB with --max-body-bytes 1024: %d %s", status, body)
		}
	})

	t.Run("oversized headers", func(t *testing.T) {
		// Go's server reads up to 4 KiB more than the limit on a new
		// connection, and 8 KiB more on a reused one (what it buffered
		// while waiting for the request counts for nothing): 12 KiB is
		// over 2 KiB + 8 KiB, and under the default's 16 KiB.
		req, _ := http.NewRequest("GET", s.url+"/plants", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Big", strings.Repeat("h", 12<<10))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		limWantError(t, resp, body, http.StatusRequestHeaderFieldsTooLarge)
		// RFC 9110, section 6.6.1: an origin server with a clock sends
		// Date in every 4xx answer, this one too, made before routing.
		if _, err := time.Parse(http.TimeFormat, resp.Header.Get("Date")); err != nil {
			t.Errorf("a 431 with Date %q: %v", resp.Header.Get("Date"), err)
		}
	})

	// The rest of an oversized head is never read. Closing with it unread
	// resets the connection, and a client whose stack drops what it has
	// not read yet on a reset would lose the answer: so the server sends
	// its FIN first, as net/http means to, and the client reads the
	// answer and then the end of the stream.
	t.Run("oversized headers end with FIN", func(t *testing.T) {
		conn := limDial(t, s.url)
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Big: %s\r\n\r\n", token, strings.Repeat("h", 12<<10))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		limWantError(t, resp, body, http.StatusRequestHeaderFieldsTooLarge)
		wantFIN(t, conn, br, "the 431 to an oversized head")
	})
}

// wantFIN checks that the next read on conn, through br, after answer is
// the end of the stream, sent before the server closes: it waits 500 ms
// between its FIN and the close (net/http's rstAvoidanceDelay), and a
// close without the FIN resets the connection instead.
func wantFIN(t *testing.T, conn net.Conn, br *bufio.Reader, answer string) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after %s: %d bytes, %v; want the end of the stream (FIN)", answer, n, err)
	}
}

// slowlorisBesideOthers holds 20 connections with headers sent a byte at a
// time: each is cut off by --read-header-timeout, and requests of others
// are served meanwhile.
func slowlorisBesideOthers(t *testing.T, client *http.Client, url, token string) {
	stop := make(chan struct{})
	var others sync.WaitGroup
	served := 0
	others.Go(func() { served = requestsUntil(t, client, url, token, stop) })
	var slow sync.WaitGroup
	for range 20 {
		slow.Go(func() { slowlorisClient(t, url) })
	}
	slow.Wait()
	close(stop)
	others.Wait()
	t.Logf("%d requests served beside the slow clients", served)
	if served < 4 {
		t.Errorf("only %d requests served beside the slow clients in a second", served)
	}
}

// requestsUntil sends creates and lists every 10 ms until stop, each of
// which must be answered 200 within a second, and returns how many were.
func requestsUntil(t *testing.T, client *http.Client, url, token string, stop <-chan struct{}) (served int) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return served
		case <-time.After(10 * time.Millisecond):
		}
		begin := time.Now()
		req, _ := http.NewRequest("GET", url+"/plants?limit=1", nil)
		if i%2 == 0 {
			req, _ = http.NewRequest("POST", url+"/plants", strings.NewReader(fmt.Sprintf(`{"id":%d,"name":"meanwhile"}`, 1000+i)))
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("a request beside the slow clients: %v", err)
			return served
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s %s beside the slow clients: %d", req.Method, req.URL, resp.StatusCode)
		}
		if took := time.Since(begin); took > time.Second {
			t.Errorf("%s %s beside the slow clients took %v", req.Method, req.URL, took)
		}
		served++
	}
}

// slowlorisClient sends a request's headers a byte every 100 ms and
// checks that it is cut off within 1.5 s, with nothing or the Error body.
func slowlorisClient(t *testing.T, url string) {
	// Not limDial: a goroutine must not end the test with Fatal.
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	begin := time.Now()
	closed := make(chan []byte)
	go func() {
		got, _ := io.ReadAll(conn)
		closed <- got
	}()
	request := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 100)
	for i := 0; ; i++ {
		select {
		case got := <-closed:
			if took := time.Since(begin); took > 1500*time.Millisecond {
				t.Errorf("a slowloris client was cut off after %v, with --read-header-timeout 1s", took)
			}
			// Go answers 400 when the request line is incomplete,
			// nothing when the headers are.
			if len(got) > 0 {
				resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(got))), nil)
				if err != nil {
					t.Errorf("a slowloris client got %q", got)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				var e struct{ Error int }
				if json.Unmarshal(body, &e) != nil || e.Error != resp.StatusCode || resp.Header.Get("Content-Type") != "application/json" {
					t.Errorf("a slowloris client got %q, not the Error body", got)
				}
			}
			return
		case <-time.After(100 * time.Millisecond):
			if i >= 50 {
				t.Error("a slowloris client held its connection for 5 s")
				return
			}
			conn.Write([]byte{request[i%len(request)]})
		}
	}
}

// trickle sends on conn a create of plant id with its head at once and
// its body a byte at a time over spread, and returns the answer.
func trickle(t *testing.T, conn net.Conn, token string, id int64, spread time.Duration) (*http.Response, []byte) {
	t.Helper()
	body := fmt.Sprintf(`{"id":%d,"name":"slow upload"}`, id)
	fmt.Fprintf(conn, "POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", token, len(body))
	for i := range len(body) {
		time.Sleep(spread / time.Duration(len(body)))
		if _, err := conn.Write([]byte{body[i]}); err != nil {
			break // answered early: read it
		}
	}
	return limRaw(t, conn, "POST", "/plants")
}

// The whole request, head and body, is bounded by --read-timeout, even
// when --body-read-timeout alone would allow more; and a slow upload
// within the client's limits is the client's time, not the service's:
// it does not spend --request-timeout, whose 503 would blame the store.
func TestSlowUploadsAndTheirTimeouts(t *testing.T) {
	t.Parallel()
	t.Run("read-timeout bounds head and body", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		token := mustToken(t, dir, "--name", "me")
		// 2 s for the head leaves the body 1 s of the 3 s.
		s := serve(t, dir, "--read-header-timeout", "2s", "--read-timeout", "3s", "--body-read-timeout", "3s")
		conn := limDial(t, s.url)
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		resp, body := trickle(t, conn, token, 1, 2*time.Second)
		limWantError(t, resp, body, http.StatusRequestTimeout)
		if resp, _ := limRequest(t, apitest.Client(t), "GET", s.url+"/plants/1", token, ""); resp.StatusCode != http.StatusNotFound {
			t.Errorf("a body cut off by the read timeout was stored: GET %d", resp.StatusCode)
		}
	})
	t.Run("an upload slower than request-timeout", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		token := mustToken(t, dir, "--name", "me")
		s := serve(t, dir, "--read-header-timeout", "1s", "--read-timeout", "10s", "--body-read-timeout", "5s", "--request-timeout", "1s")
		conn := limDial(t, s.url)
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if resp, body := trickle(t, conn, token, 2, 2*time.Second); resp.StatusCode != http.StatusOK {
			t.Errorf("a body sent over 2 s, within --body-read-timeout 5s, with --request-timeout 1s: %d %s", resp.StatusCode, body)
		}
		if resp, _ := limRequest(t, apitest.Client(t), "GET", s.url+"/plants/2", token, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("the slow upload's plant: GET %d", resp.StatusCode)
		}
	})
}
