package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
)

// Most of these tests run "plantstore serve" in this process, as main runs
// it (run, with flags and environment), so the race detector watches the
// whole assembled service when the suite runs with -race. The rest run the
// built binary, as a user would: the command line, signals and exit
// codes, SIGKILL, limits set on a process.
var binary string

func TestMain(m *testing.M) {
	// The tests set the variables they mean; one left in the shell (the
	// README's quick start exports PLANTSTORE_TOKEN) would reach every
	// command they run. Their own switches, PLANTSTORE_TEST_*, stay.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "PLANTSTORE_") && !strings.HasPrefix(name, "PLANTSTORE_TEST_") {
			os.Unsetenv(name)
		}
	}
	if why := pgtest.Unset("cmd/plantstore"); why != "" {
		fmt.Println(why)
	}
	dir, err := os.MkdirTemp("", "plantstore-bin")
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "plantstore")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race") // the processes are race-checked too
		// A race-checked process sleeps a second as it exits, by default,
		// and the suite runs the binary a hundred times: set it to none
		// for every process the tests start.
		os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Println("build:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var tokenShape = regexp.MustCompile(`^pst_[0-9A-Za-z]{38}\n$`)

type result struct {
	stdout, stderr string
	exit           int
}

// cli runs the binary to completion in dir with env added.
func cli(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	// A command that should end but serves instead fails the test, rather
	// than hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("plantstore %q did not end within 2 minutes; stderr:\n%s", args, stderr.String())
	}
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		r.exit = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// cliOutputFull runs the binary as cli does, with its standard output on
// /dev/full, where every write fails (no space left on device). It skips
// the test where there is no /dev/full.
func cliOutputFull(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full here:", err)
	}
	defer full.Close()
	return cliOutputTo(t, full, dir, env, args...)
}

// cliOutputTo runs the binary as cli does, with its standard output on
// out (nil: /dev/null, as os/exec does; Go's runtime does the same with
// a standard output that was closed).
func cliOutputTo(t *testing.T, out *os.File, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if out != nil {
		cmd.Stdout = out
	}
	err := cmd.Run()
	r := result{stderr: stderr.String()}
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		r.exit = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// runUntil lets a load run for at least least and until enough says it
// has done enough to be worth checking, for 30 s at most: under -race, or
// on a slow machine, a fixed time can leave a crash test with too little.
func runUntil(least time.Duration, enough func() bool) {
	started := time.Now()
	for time.Since(started) < 30*time.Second {
		if time.Since(started) >= least && enough() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustToken(t *testing.T, dir string, args ...string) string {
	t.Helper()
	r := cli(t, dir, nil, append([]string{"token", "create"}, args...)...)
	if r.exit != 0 || !tokenShape.MatchString(r.stdout) {
		t.Fatalf("token create: exit %d, stdout %q, stderr %q", r.exit, r.stdout, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

// server is a running "plantstore serve": in this process, or a process
// of the built binary.
type server struct {
	url  string
	logs *apitest.Buffer
	done chan error // what run returned, or how the process ended
	// cancel stops an in-process server, as SIGTERM stops a process.
	cancel context.CancelFunc
	cmd    *exec.Cmd // a process's
}

// serve runs "plantstore serve" in this process, on the store in dir
// unless args or the environment name another, and waits until it
// listens.
func serve(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	s, addr := launch(t, dir, args...)
	s.await(t, addr, 20*time.Second)
	return s
}

// serveProcess runs the built binary's "plantstore serve" in dir and waits
// until it listens: for tests that signal it, kill it or limit it.
func serveProcess(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	s, addr := launchProcess(t, dir, args...)
	s.await(t, addr, 20*time.Second)
	return s
}

// launch starts an in-process "plantstore serve" and returns at once; the
// listening address arrives on addr. It is stopped when the test ends.
func launch(t *testing.T, dir string, args ...string) (s *server, addr chan string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	s = &server{logs: &apitest.Buffer{}, done: make(chan error, 1), cancel: cancel}
	addr = s.readLog(pr)
	args = append([]string{"serve", "--addr", "127.0.0.1:0"}, storeIn(dir, args)...)
	go func() {
		err := run(ctx, args, os.Environ(), nil, io.Discard, pw)
		pw.Close()
		s.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		err := <-s.done
		s.done <- err // for whoever else waits
	})
	return s, addr
}

// storeIn makes args name the store in dir, as the binary run in dir
// finds ./plantstore.db, unless they or the environment name one.
func storeIn(dir string, args []string) []string {
	for i, a := range args {
		if a == "--db" || a == "-db" {
			if i+1 < len(args) && !filepath.IsAbs(args[i+1]) && !strings.Contains(args[i+1], "://") {
				args = slices.Clone(args)
				args[i+1] = filepath.Join(dir, args[i+1])
			}
			return args
		}
		if strings.HasPrefix(a, "--db=") || strings.HasPrefix(a, "-db=") {
			return args
		}
	}
	if os.Getenv("PLANTSTORE_DB") != "" {
		return args
	}
	return append([]string{"--db", filepath.Join(dir, "plantstore.db")}, args...)
}

// launchProcess starts the binary's "plantstore serve" in dir and returns
// at once; the listening address arrives on addr. It is killed when the
// test ends.
func launchProcess(t *testing.T, dir string, args ...string) (s *server, addr chan string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Dir = dir
	return startProcess(t, cmd)
}

// startProcess starts cmd, a "plantstore serve" however run, as
// launchProcess does.
func startProcess(t *testing.T, cmd *exec.Cmd) (s *server, addr chan string) {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s = &server{cmd: cmd, logs: &apitest.Buffer{}, done: make(chan error, 1)}
	addr = s.readLog(pr)
	go func() {
		err := cmd.Wait()
		pw.Close()
		s.done <- err
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		err := <-s.done
		s.done <- err // for whoever else waits
	})
	return s, addr
}

// readLog copies the server's log from r into s.logs and sends the
// address of its "listening" line on the channel it returns.
func (s *server) readLog(r io.Reader) chan string {
	addr := make(chan string, 1)
	go func() {
		scan := bufio.NewScanner(r)
		scan.Buffer(make([]byte, 1<<20), 1<<20)
		for scan.Scan() {
			s.logs.Write(append(scan.Bytes(), '\n'))
			var line struct{ Msg, Addr string }
			if json.Unmarshal(scan.Bytes(), &line) == nil && line.Msg == "listening" {
				select {
				case addr <- line.Addr:
				default:
				}
			}
		}
		io.Copy(io.Discard, r)
	}()
	return addr
}

// await waits until s listens, failing the test if it exits or the
// timeout passes first.
func (s *server) await(t *testing.T, addr chan string, timeout time.Duration) {
	t.Helper()
	select {
	case a := <-addr:
		s.url = "http://" + a
	case err := <-s.done:
		s.done <- err // for the cleanup
		t.Fatalf("serve exited before listening: %v\n%s", err, s.logs)
	case <-time.After(timeout):
		t.Fatalf("serve did not listen within %v\n%s", timeout, s.logs)
	}
}

// stop stops the server (sig for a process; an in-process server's
// context ends, which is what SIGTERM and SIGINT do in main) and returns
// its exit code.
func (s *server) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	if s.cmd != nil {
		s.cmd.Process.Signal(sig)
	} else {
		s.cancel()
	}
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		if s.cmd == nil {
			return exitCode(err)
		}
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatal("server did not exit within 30 s")
		return -1
	}
}

// kill ends a process server with SIGKILL and waits for it.
func (s *server) kill(t *testing.T) {
	t.Helper()
	if s.cmd == nil {
		t.Fatal("kill needs a process: start the server with serveProcess")
	}
	s.cmd.Process.Kill()
	err := <-s.done
	s.done <- err // for the cleanup
}

// exitCode is the status main exits with after run returns err.
func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsageShown):
		return 2
	}
	if _, ok := errors.AsType[usageError](err); ok {
		return 2
	}
	return 1
}

func create(t *testing.T, client *http.Client, url, token, body string) (int, string) {
	t.Helper()
	return request(t, client, "POST", url+"/plants", token, body)
}

// request is send (crash_test.go), failing t when no answer comes.
func request(t *testing.T, client *http.Client, method, url, token, body string) (int, string) {
	t.Helper()
	status, _, answer, err := send(client, method, url, token, body)
	if err != nil {
		t.Fatal(err)
	}
	return status, string(answer)
}

func TestTokenCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := mustToken(t, dir, "--name", "deploy", "--scope", "plants:read")
	r := cli(t, dir, nil, "token", "list")
	if r.exit != 0 || !strings.Contains(r.stdout, "deploy") || !strings.Contains(r.stdout, "plants:read") {
		t.Errorf("token list: %+v", r)
	}
	if strings.Contains(r.stdout, secret) || strings.Contains(r.stdout, "pst_") {
		t.Errorf("token list shows a secret:\n%s", r.stdout)
	}
	for _, col := range []string{"NAME", "SCOPES", "CREATED", "LAST USED"} {
		if !strings.Contains(r.stdout, col) {
			t.Errorf("token list has no %s column:\n%s", col, r.stdout)
		}
	}
	if r := cli(t, dir, nil, "token", "create", "--name", "deploy"); r.exit != 1 || !strings.Contains(r.stderr, `already named "deploy": add --replace`) || r.stdout != "" {
		t.Errorf("duplicate name: %+v", r)
	}
	if r := cli(t, dir, nil, "token", "revoke", "deploy"); r.exit != 0 {
		t.Errorf("revoke: %+v", r)
	}
	if r := cli(t, dir, nil, "token", "revoke", "deploy"); r.exit != 1 || !strings.Contains(r.stderr, "no active token") {
		t.Errorf("second revoke: %+v", r)
	}
	if r := cli(t, dir, nil, "token", "list"); strings.Contains(r.stdout, "deploy") {
		t.Errorf("revoked token still listed:\n%s", r.stdout)
	}
	if r := cli(t, dir, nil, "token", "list", "--all"); !strings.Contains(r.stdout, "deploy") || !strings.Contains(r.stdout, "REVOKED") {
		t.Errorf("token list --all:\n%s", r.stdout)
	}
	mustToken(t, dir, "--name", "deploy") // a revoked name can be issued again
	// A name that would reorder or hide part of the table's row on a
	// terminal (a bidi override, a zero-width space) is quoted there, as
	// the plant tables quote such text.
	mustToken(t, dir, "--name", "\u202eecila")
	mustToken(t, dir, "--name", "ali\u200bce")
	// As are the messages that name it (a combining grapheme joiner:
	// printable to Go's %q, invisible on a terminal).
	if r := cli(t, dir, nil, "token", "create", "--name", "\u034f"); r.exit != 0 || !strings.Contains(r.stderr, `created token "\u034f"`) {
		t.Errorf("token create with an invisible name: %+v", r)
	}
	if r := cli(t, dir, nil, "token", "revoke", "\u034f"); r.exit != 0 || !strings.Contains(r.stderr, `revoked token "\u034f"`) {
		t.Errorf("token revoke of an invisible name: %+v", r)
	}
	if r := cli(t, dir, nil, "token", "list"); !strings.Contains(r.stdout, `"\u202eecila"`) || !strings.Contains(r.stdout, `"ali\u200bce"`) || strings.ContainsAny(r.stdout, "\u202e\u200b") {
		t.Errorf("token list shows invisible characters as they are:\n%s", r.stdout)
	}
	for _, args := range [][]string{
		{"token", "create"},
		{"token", "create", "--name", "x", "--scope", "plants:admin"},
		{"token", "create", "--name", ""},
		// White space at an end would pass for another name, or none.
		{"token", "create", "--name", "  "},
		{"token", "create", "--name", "deploy "},
		{"token", "create", "--name", "\u00a0deploy"},
		// A name is logged with every request: never a secret pasted.
		{"token", "create", "--name", plantstore.NewToken()},
		{"token", "create", "--name", "ci " + strings.TrimPrefix(plantstore.NewToken(), plantstore.TokenPrefix)},
		{"token", "revoke"},
		// After "--", arguments only: two here.
		{"token", "revoke", "--", "deploy", "--db", "other.db"},
		{"token", "frobnicate"},
		{"token"},
		{"bogus"},
		{},
		{"serve", "extra-argument"},
	} {
		if r := cli(t, dir, nil, args...); r.exit != 2 || r.stdout != "" {
			t.Errorf("%q: exit %d stdout %q, want exit 2", args, r.exit, r.stdout)
		}
	}
	// --db and its variable select the file.
	other := filepath.Join(t.TempDir(), "other.db")
	mustToken(t, dir, "--name", "elsewhere", "--db", other)
	if r := cli(t, dir, []string{"PLANTSTORE_DB=" + other}, "token", "list"); !strings.Contains(r.stdout, "elsewhere") {
		t.Errorf("PLANTSTORE_DB not honoured:\n%s", r.stdout)
	}
	if r := cli(t, dir, []string{"PLANTSTORE_BUSY_TIMEOUT=soon"}, "token", "list"); r.exit != 2 || !strings.Contains(r.stderr, "PLANTSTORE_BUSY_TIMEOUT") {
		t.Errorf("a bad variable: %+v", r)
	}
	// The flag wins over the variable, a malformed one included.
	if r := cli(t, dir, []string{"PLANTSTORE_BUSY_TIMEOUT=soon"}, "token", "list", "--busy-timeout", "1s"); r.exit != 0 {
		t.Errorf("a flag over a bad variable: %+v", r)
	}
}

// The README's quick start: serve on the defaults in a directory, issue a
// token there while it runs, create a plant.
func TestQuickStart(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, dir)
	token := mustToken(t, dir, "--name", "me")
	client := apitest.Client(t)
	status, body := create(t, client, s.url, token, `{"id":1,"name":"Monstera","tag":"tropical"}`)
	if status != 200 || body != `{"name":"Monstera","tag":"tropical"}` {
		t.Fatalf("first create: %d %s", status, body)
	}
	if _, err := os.Stat(filepath.Join(dir, "plantstore.db")); err != nil {
		t.Errorf("the default store ./plantstore.db: %v", err)
	}
	if code := s.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	if strings.Contains(s.logs.String(), token) {
		t.Error("the token appears in the server's log")
	}
	// Last use is recorded by the time the server has stopped.
	if r := cli(t, dir, nil, "token", "list"); !regexp.MustCompile(`me\s+\S+\s+\S+\s+20\d\d-`).MatchString(r.stdout) {
		t.Errorf("last use not recorded:\n%s", r.stdout)
	}
}

func TestTokensChangeWhileServing(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, dir)
	client := apitest.Client(t)
	token := mustToken(t, dir, "--name", "late")
	if status, body := create(t, client, s.url, token, `{"id":1,"name":"a"}`); status != 200 {
		t.Fatalf("a token created while serving: %d %s", status, body)
	}
	if r := cli(t, dir, nil, "token", "revoke", "late"); r.exit != 0 {
		t.Fatalf("revoke: %+v", r)
	}
	revoked := time.Now()
	for {
		status, _ := create(t, client, s.url, token, `{"id":1,"name":"a"}`)
		if status == 401 {
			break
		}
		if time.Since(revoked) > 5*time.Second {
			t.Fatal("a revoked token still works 5 s later")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("revocation took effect after %v", time.Since(revoked).Round(time.Millisecond))
}

// SIGTERM lets a request in flight finish, then exits 0.
func TestGracefulShutdown(t *testing.T) {
	dir := t.TempDir()
	s := serveProcess(t, dir)
	token := mustToken(t, dir, "--name", "me")
	body := `{"id":5,"name":"slow upload"}`
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", s.url+"/plants", pr)
	req.ContentLength = int64(len(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	answered := make(chan int, 1)
	c := apitest.Client(t) // here: it may t.Fatal, which a goroutine must not
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	io.WriteString(pw, body[:10])
	time.Sleep(200 * time.Millisecond) // the request is in flight
	s.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	io.WriteString(pw, body[10:])
	pw.Close()
	if status := <-answered; status != 200 {
		t.Errorf("the in-flight request got %d", status)
	}
	if code := s.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	if !strings.Contains(s.logs.String(), `"msg":"stopped"`) {
		t.Errorf("no clean stop in the log:\n%s", s.logs)
	}
}

// With --drain-delay, SIGTERM first makes /readyz answer 503 while every
// request is still served, on keep-alive connections open before it and
// new ones alike, for the delay; then the shutdown goes on as without it.
func TestDrainDelay(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "me")
	s := serveProcess(t, dir, "--drain-delay", "1500ms")
	client := apitest.Client(t)
	if a := do(client, "GET", s.url+"/readyz", "", ""); a.status != 200 {
		t.Fatalf("/readyz before SIGTERM: %v", a)
	}
	signalled := time.Now()
	s.cmd.Process.Signal(syscall.SIGTERM)
	if !s.logged(`"msg":"draining`, 5*time.Second) {
		t.Fatalf("no draining line after SIGTERM:\n%s", s.logs)
	}
	a := do(client, "GET", s.url+"/readyz", "", "")
	if a.status != 503 || a.contentType != "application/json" || a.body != `{"error":503,"message":"the server is shutting down"}` {
		t.Errorf("/readyz while draining: %v; want 503 saying the server is shutting down", a)
	}
	if a := do(client, "POST", s.url+"/plants", token, `{"id":1,"name":"fern"}`); a.status != 200 {
		t.Errorf("a create while draining: %v; want it served", a)
	}
	fresh := apitest.Client(t) // a new connection, as a load balancer's next one
	if a := do(fresh, "GET", s.url+"/plants/1", token, ""); a.status != 200 {
		t.Errorf("a read on a new connection while draining: %v; want it served", a)
	}
	if !s.logged(`"msg":"stopped"`, 10*time.Second) {
		t.Fatalf("no stop after the drain:\n%s", s.logs)
	}
	if took := time.Since(signalled); took < 1500*time.Millisecond {
		t.Errorf("stopped %v after SIGTERM, before the 1.5 s drain ended", took)
	}
	if code := s.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d", code)
	}
	logs := s.logs.String()
	if d, sd := strings.Index(logs, `"msg":"draining`), strings.Index(logs, `"msg":"shutting down"`); d < 0 || sd < d {
		t.Errorf("the log does not say draining, then shutting down:\n%s", logs)
	}
	// The drain's 503 is planned, no failure: its access line is enough.
	if strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("the drain's 503 is logged as a failure:\n%s", logs)
	}
}

func TestSIGINTExitsZero(t *testing.T) {
	s := serveProcess(t, t.TempDir())
	if code := s.stop(t, os.Interrupt); code != 0 {
		t.Errorf("exit %d after SIGINT", code)
	}
}

// SIGHUP stops serve gracefully, as SIGTERM does, rather than killing it
// outright (Go's default), which left the log's last line unsaid; started
// with SIGHUP ignored (nohup), serve keeps ignoring it.
func TestSIGHUP(t *testing.T) {
	s := serveProcess(t, t.TempDir())
	if code := s.stop(t, syscall.SIGHUP); code != 0 || !strings.Contains(s.logs.String(), `"msg":"stopped"`) {
		t.Errorf("exit %d after SIGHUP, want 0 after a graceful stop:\n%s", code, s.logs)
	}
	// The log says which signal stopped it: log rotation's SIGHUP is told
	// from an orchestrator's SIGTERM.
	if !strings.Contains(s.logs.String(), `"msg":"stop asked","cause":"interrupted by SIGHUP"`) {
		t.Errorf("the log does not say SIGHUP stopped it:\n%s", s.logs)
	}

	dir := t.TempDir()
	cmd := exec.Command("bash", "-c", `trap '' HUP; exec "$0" serve --addr 127.0.0.1:0`, binary)
	cmd.Dir = dir
	nohup, addr := startProcess(t, cmd)
	nohup.await(t, addr, 20*time.Second)
	nohup.cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(300 * time.Millisecond)
	if a := do(apitest.Client(t), "GET", nohup.url+"/healthz", "", ""); a.status != 200 || strings.Contains(nohup.logs.String(), "shutting down") {
		t.Errorf("serve started with SIGHUP ignored: %v after SIGHUP, want it still serving:\n%s", a, nohup.logs)
	}
	if code := nohup.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
}

// A signal while the store is still opening (here waiting for another
// process's lock on the SQLite file) stops serve as any stop does: exit
// 0, the log saying so and which signal, not a failure of the store.
func TestSignalWhileOpening(t *testing.T) {
	dir := t.TempDir()
	mustToken(t, dir, "--name", "me") // makes the store
	raw, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "plantstore.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)
	if _, err := raw.Exec(`BEGIN EXCLUSIVE`); err != nil {
		t.Fatal(err)
	}
	defer raw.Exec(`ROLLBACK`)
	s, _ := launchProcess(t, dir, "--busy-timeout", "60s")
	time.Sleep(time.Second) // in Open, waiting for the lock
	if code := s.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM while opening, want 0:\n%s", code, s.logs)
	}
	if logs := s.logs.String(); !strings.Contains(logs, `"msg":"stopped before serving: the store was still opening","cause":"interrupted by SIGTERM"`) || strings.Contains(logs, "cancelled") {
		t.Errorf("the log of a stop while opening:\n%s", logs)
	}
}

func TestPersistenceAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "me")
	client := apitest.Client(t)
	s := serve(t, dir)
	if status, body := create(t, client, s.url, token, `{"id":9,"name":"Cactus","tag":"desert"}`); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	s.stop(t, syscall.SIGTERM)
	s = serve(t, dir)
	if status, body := create(t, client, s.url, token, `{"id":9,"name":"Cactus","tag":"desert"}`); status != 200 || body != `{"name":"Cactus","tag":"desert"}` {
		t.Errorf("replay after restart: %d %s", status, body)
	}
	if status, _ := create(t, client, s.url, token, `{"id":9,"name":"Cactus"}`); status != 409 {
		t.Errorf("conflict after restart: %d, want 409", status)
	}
}

func TestEnvironmentConfiguration(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(t.TempDir(), "env.db")
	cmd := exec.Command(binary, "serve")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PLANTSTORE_ADDR=127.0.0.1:0", "PLANTSTORE_DB="+db, "PLANTSTORE_LOG_FORMAT=text")
	var stderr apitest.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stderr.String(), "msg=listening") {
		if time.Now().After(deadline) {
			t.Fatalf("no text-format listening line:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), "db="+db) {
		t.Errorf("PLANTSTORE_DB not used:\n%s", stderr.String())
	}
	if _, err := os.Stat(db); err != nil {
		t.Error(err)
	}
}

// The process is killed with SIGKILL at a random moment during concurrent
// creates; after a restart every plant it acknowledged is there, intact.
func TestCrashLosesNoAcknowledgedPlant(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "crash")
	client := &http.Client{Timeout: 10 * time.Second}
	acked := map[int64]string{}
	var mu sync.Mutex
	for round := range 3 {
		s := serveProcess(t, dir)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := int64(0); ctx.Err() == nil; i++ {
					id := int64(round)<<40 | int64(w)<<32 | i
					name := fmt.Sprintf("plant %d/%d/%d", round, w, i)
					req, _ := http.NewRequestWithContext(ctx, "POST", s.url+"/plants",
						strings.NewReader(fmt.Sprintf(`{"id":%d,"name":%q}`, id, name)))
					req.Header.Set("Authorization", "Bearer "+token)
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					if err != nil {
						return // the server is gone
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						mu.Lock()
						acked[id] = name
						mu.Unlock()
					} else {
						t.Errorf("create %d: %d", id, resp.StatusCode)
						return
					}
				}
			})
		}
		runUntil(time.Duration(300+round*250)*time.Millisecond, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acked) >= (round+1)*50
		})
		s.kill(t)
		cancel()
		wg.Wait()
	}
	if len(acked) < 100 {
		t.Fatalf("only %d creates were acknowledged; the test proves little", len(acked))
	}
	checkStore(t, filepath.Join(dir, "plantstore.db"), acked)
	t.Logf("%d acknowledged plants survived 3 SIGKILLs", len(acked))

	// And the service itself comes back and knows them.
	s := serve(t, dir)
	checked := 0
	for id, name := range acked {
		status, _ := create(t, apitest.Client(t), s.url, token, fmt.Sprintf(`{"id":%d,"name":%q}`, id, name))
		if status != 200 {
			t.Errorf("replay of acknowledged plant %d: %d", id, status)
		}
		if status, _ := create(t, apitest.Client(t), s.url, token, fmt.Sprintf(`{"id":%d,"name":"other"}`, id)); status != 409 {
			t.Errorf("plant %d: a different name got %d, want 409 (is it stored?)", id, status)
		}
		if checked++; checked == 50 {
			break
		}
	}
}

// One server per SQLite file: a second serve is refused and says why,
// also once the first's lock file was removed by hand; the token commands
// still work beside the first; a killed server's lock goes with it.
func TestOneServerPerFile(t *testing.T) {
	dir := t.TempDir()
	s := serveProcess(t, dir)
	r := cli(t, dir, nil, "serve", "--addr", "127.0.0.1:0")
	if r.exit != 1 || !strings.Contains(r.stderr, "another plantstore serve is using") {
		t.Errorf("a second serve: exit %d, stderr %q", r.exit, r.stderr)
	}
	mustToken(t, dir, "--name", "beside")
	// Its lock file removed by hand, taken for one a crash left: the
	// server makes it again, and a second serve is still refused.
	if err := os.Remove(filepath.Join(dir, "plantstore.db.lock")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(s.logs.String(), "lock file was removed") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	r = cli(t, dir, nil, "serve", "--addr", "127.0.0.1:0")
	if r.exit != 1 || !strings.Contains(r.stderr, "another plantstore serve is using") {
		t.Errorf("a second serve once the lock file was removed: exit %d, stderr %q; first server's log:\n%s", r.exit, r.stderr, s.logs)
	}
	s.kill(t)
	serve(t, dir) // starts: the lock died with the process
}

// An address serve cannot listen on is said, and no store is made for
// it: a port taken leaves no empty plantstore.db behind. (A port out of
// range is a usage mistake: TestServeAddressesChecked.)
func TestUnusableAddressMakesNoStore(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, args := range [][]string{
		{"--addr", taken.Addr().String()},
		{"--addr", "127.0.0.1:0", "--metrics-addr", taken.Addr().String()},
		{"--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--pprof-addr", taken.Addr().String()},
	} {
		dir := t.TempDir()
		r := cli(t, dir, nil, append([]string{"serve"}, args...)...)
		flag := args[len(args)-2]
		if r.exit != 1 || !strings.Contains(r.stderr, "listen") || (flag != "--addr" && !strings.Contains(r.stderr, flag)) {
			t.Errorf("serve %q: exit %d, stderr %q; want exit 1 and the listen error of %s", args, r.exit, r.stderr, flag)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("serve %q left %d files in its directory, the first %q", args, len(entries), entries[0].Name())
		}
	}
}
