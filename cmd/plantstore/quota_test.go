//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Under a cgroup quota of one CPU, serve runs with GOMAXPROCS 1, where Go
// alone would choose 2; a GOMAXPROCS in the environment still wins. The
// reading of the cgroup files is tested on many layouts in
// internal/cpulimit; this runs the built binary in a real cgroup.
func TestOneProcUnderAQuotaOfOneCPU(t *testing.T) {
	group := quotaCgroup(t, 100_000, 100_000)
	for _, tc := range []struct {
		env  []string
		want int
	}{
		{nil, 1},
		{[]string{"GOMAXPROCS=2"}, 2},
	} {
		dir := t.TempDir()
		// The shell moves itself into the cgroup and becomes the server.
		cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`,
			group, binary, "serve", "--addr", "127.0.0.1:0")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), tc.env...)
		s, addr := startProcess(t, cmd)
		s.await(t, addr, 20*time.Second)
		if got := listeningProcs(t, s.logs.String()); got != tc.want {
			t.Errorf("with %q under a quota of one CPU: gomaxprocs %d, want %d\n%s", tc.env, got, tc.want, s.logs)
		}
		s.stop(t, os.Interrupt)
	}
}

// listeningProcs reads the gomaxprocs of serve's "listening" line.
func listeningProcs(t *testing.T, logs string) int {
	t.Helper()
	for line := range strings.Lines(logs) {
		var l struct {
			Msg        string
			Gomaxprocs int
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" {
			return l.Gomaxprocs
		}
	}
	t.Fatalf("no listening line:\n%s", logs)
	return 0
}

// quotaCgroup makes a cgroup with a CPU quota of quota µs per period µs,
// removed when the test ends: in cgroup v2 when /sys/fs/cgroup is one
// with the cpu controller, else in cgroup v1's cpu hierarchy. It needs
// root and a cpu controller, which a machine without them cannot give.
func quotaCgroup(t *testing.T, quota, period int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a cgroup needs root")
	}
	const root = "/sys/fs/cgroup"
	name := "plantstore-test-" + filepath.Base(t.TempDir())
	var dir string
	write := func(file, value string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			t.Fatal(err)
		}
	}
	if controllers, err := os.ReadFile(root + "/cgroup.controllers"); err == nil {
		if !strings.Contains(" "+string(controllers)+" ", " cpu ") {
			t.Skip("cgroup v2 without the cpu controller")
		}
		if err := os.WriteFile(root+"/cgroup.subtree_control", []byte("+cpu"), 0); err != nil {
			t.Skipf("cannot enable the cpu controller: %v", err)
		}
		dir = filepath.Join(root, name)
		mkCgroup(t, dir)
		write("cpu.max", strconv.Itoa(quota)+" "+strconv.Itoa(period))
		return dir
	}
	for _, hierarchy := range []string{"cpu", "cpu,cpuacct"} {
		if _, err := os.Stat(filepath.Join(root, hierarchy, "cpu.cfs_quota_us")); err == nil {
			dir = filepath.Join(root, hierarchy, name)
			mkCgroup(t, dir)
			write("cpu.cfs_period_us", strconv.Itoa(period))
			write("cpu.cfs_quota_us", strconv.Itoa(quota))
			return dir
		}
	}
	t.Skip("no cgroup cpu controller (neither v2 with cpu nor v1's cpu.cfs_quota_us)")
	return ""
}

func mkCgroup(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		// The cgroup empties once its processes have exited.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if err := os.Remove(dir); err == nil || time.Now().After(deadline) {
				return
			}
		}
	})
}
