package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
)

func TestVersionInfo(t *testing.T) {
	t.Parallel()
	const rev = "f7a126143a70e367efe6f863e26a825daa4c5795"
	goPlatform := runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	// What Go records in a git checkout, with uncommitted changes or not.
	vcs := func(modified string) *debug.BuildInfo {
		v := "v0.0.0-20261122082521-f7a126143a70"
		if modified == "true" {
			v += "+dirty"
		}
		return &debug.BuildInfo{
			Main: debug.Module{Version: v},
			Settings: []debug.BuildSetting{
				{Key: "vcs", Value: "git"},
				{Key: "vcs.revision", Value: rev},
				{Key: "vcs.time", Value: "2026-11-22T08:25:21Z"},
				{Key: "vcs.modified", Value: modified},
			},
		}
	}
	for _, tc := range []struct {
		name                  string
		bi                    *debug.BuildInfo
		version, commit, date string
		want                  string
	}{
		{"nothing known", nil, "dev", "", "",
			"plantstore dev (commit unknown, " + goPlatform + ")"},
		{"set at link time", nil, "1.2.0", "abc1234", "2026-11-22T08:00:00Z",
			"plantstore 1.2.0 (commit abc1234, built 2026-11-22T08:00:00Z, " + goPlatform + ")"},
		{"from git, clean; the version given wins", vcs("false"), "1.2.0", "", "2026-11-22T09:00:00Z",
			"plantstore 1.2.0 (commit f7a126143a70, committed 2026-11-22T08:25:21Z, built 2026-11-22T09:00:00Z, " + goPlatform + ")"},
		{"from git, changed; the module's version when none is given", vcs("true"), "dev", "", "",
			"plantstore v0.0.0-20261122082521-f7a126143a70+dirty (commit f7a126143a70+dirty, committed 2026-11-22T08:25:21Z, " + goPlatform + ")"},
		{"git wins over a commit given at link time", vcs("false"), "dev", "0000000", "",
			"plantstore v0.0.0-20261122082521-f7a126143a70 (commit f7a126143a70, committed 2026-11-22T08:25:21Z, " + goPlatform + ")"},
		{"a go build outside git", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev", "abc1234", "",
			"plantstore dev (commit abc1234, " + goPlatform + ")"},
		{"go install at a tag", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}}, "dev", "", "",
			"plantstore v1.2.0 (commit unknown, " + goPlatform + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newAbout(tc.bi, tc.version, tc.commit, tc.date).String(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// A binary built with the -ldflags of deploy/build.sh says what they set,
// from "version" and "--version", as text or JSON.
func TestVersionFromLinkerFlags(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "plantstore")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin,
		"-ldflags", "-X main.version=1.2.0 -X main.commit=abc1234 -X main.date=2026-11-22T08:00:00Z", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want := "plantstore 1.2.0 (commit abc1234, built 2026-11-22T08:00:00Z, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil || string(out) != want {
			t.Errorf("%s: %v\ngot  %q\nwant %q", arg, err, out, want)
		}
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var a about
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("version --json: %v\n%s", err, out)
	}
	if a.Version != "1.2.0" || a.Commit != "abc1234" || a.BuildTime != "2026-11-22T08:00:00Z" || a.Go != runtime.Version() || a.Modified {
		t.Errorf("version --json: %s", out)
	}
}

// A binary built in the git checkout names its commit, one git knows,
// without being told. (The machine's GOFLAGS may turn VCS stamping off;
// deploy/build.sh turns it on, as here.)
func TestVersionFromGit(t *testing.T) {
	if err := exec.Command("git", "rev-parse", "--is-inside-work-tree").Run(); err != nil {
		t.Skip("not in a git checkout:", err)
	}
	bin := filepath.Join(t.TempDir(), "plantstore")
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^plantstore \S+ \(commit ([0-9a-f]{12})(\+dirty)?, committed \S+Z, go`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("version: %q", out)
	}
	if err := exec.Command("git", "cat-file", "-e", m[1]+"^{commit}").Run(); err != nil {
		t.Errorf("version names commit %s, which git does not know: %v", m[1], err)
	}
}

func TestVersionUsage(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"version", "extra"}, nil, nil, &stdout, &stderr)
	if _, ok := errors.AsType[usageError](err); !ok {
		t.Errorf("version extra: %v, want a usage error", err)
	}
	if err := run(context.Background(), []string{"version", "--help"}, nil, nil, &stdout, &stderr); !errors.Is(err, errHelp) || !strings.Contains(stdout.String(), "-json") {
		t.Errorf("version --help: %v\n%s", err, stdout.String())
	}
}

func TestHealth(t *testing.T) {
	var (
		mu     sync.Mutex
		status = http.StatusOK
		paths  []string
	)
	answer := func(code int) {
		mu.Lock()
		status = code
		mu.Unlock()
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		paths = append(paths, r.URL.Path)
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/healthz", http.StatusTemporaryRedirect)
			return
		}
		if status != http.StatusOK {
			// As serve answers: the Error body.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":%d,"message":"the store cannot be reached"}`, status)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	health := func(env map[string]string, args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		var environ []string
		for k, v := range env {
			environ = append(environ, k+"="+v)
		}
		err := run(context.Background(), append([]string{"health"}, args...), environ, nil, &stdout, &stderr)
		return stdout.String(), err
	}
	// In the image, PLANTSTORE_ADDR is a wildcard address; health asks
	// loopback on its port.
	env := map[string]string{"PLANTSTORE_ADDR": "0.0.0.0:" + port}
	if out, err := health(env); err != nil || !strings.Contains(out, "200 OK") {
		t.Errorf("health on a 200: %v, %q", err, out)
	}
	if _, err := health(nil, "--addr", ":"+port, "--path", "/readyz"); err != nil {
		t.Errorf("health --addr :PORT --path /readyz: %v", err)
	}
	mu.Lock()
	if got := strings.Join(paths, " "); got != "/healthz /readyz" {
		t.Errorf("asked %s, want /healthz /readyz", got)
	}
	mu.Unlock()

	answer(http.StatusServiceUnavailable)
	if _, err := health(env); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "the store cannot be reached") {
		t.Errorf("health on a 503: %v, want the status and the Error body's message", err)
	}
	answer(http.StatusOK)
	if _, err := health(env, "--path", "/moved"); err == nil || !strings.Contains(err.Error(), "307") {
		t.Errorf("health followed a redirect: %v", err)
	}
	srv.Close()
	if _, err := health(env); err == nil {
		t.Error("health with no server: no error")
	}

	for _, args := range [][]string{
		{"--addr", "127.0.0.1"},
		{"--addr", "127.0.0.1:0"},
		{"--path", "healthz"},
		{"--timeout", "0s"},
		{"extra"},
	} {
		if _, err := health(nil, args...); err == nil {
			t.Errorf("health %q: no error", args)
		} else if _, ok := errors.AsType[usageError](err); !ok {
			t.Errorf("health %q: %v, want a usage error", args, err)
		}
	}
}

// The binary's health command against the real server, as the image's
// HEALTHCHECK runs it.
func TestHealthOfServer(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, dir)
	addr := strings.TrimPrefix(s.url, "http://")
	for _, path := range []string{"/healthz", "/readyz"} {
		r := cli(t, dir, []string{"PLANTSTORE_ADDR=" + addr}, "health", "--path", path)
		if r.exit != 0 {
			t.Errorf("health --path %s: %+v", path, r)
		}
	}
	if r := cli(t, dir, []string{"PLANTSTORE_ADDR=" + addr}, "health", "--path", "/nowhere"); r.exit != 1 || !strings.Contains(r.stderr, "404") {
		t.Errorf("health --path /nowhere: %+v", r)
	}
}
