package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A shape is how the servers and the load generator share the machine's
// CPUs during a run:
//
//   - pinned: each server under "taskset -c FIRST" (one core, so Go gives
//     it GOMAXPROCS 1), the load generator on the other CPUs;
//   - quota: each server in a cgroup of its own with a quota of one CPU
//     (100 ms per 100 ms period: Go gives it GOMAXPROCS 2, its minimum
//     from a quota), free to run on any CPU; the load generator on one
//     core;
//   - unpinned: everything shares every CPU, as the scheduler likes.
//
// A server takes its GOMAXPROCS from its affinity and its cgroup when it
// starts, so it is started already inside them: through taskset, or
// through a shell that moves itself into the cgroup and then execs it.
// plantstore is seeded unconfined, then restarted so on the seeded store.
// The generator is confined only once the servers run (they must not
// inherit its CPUs), and set free again before the next shape.
type shape struct {
	name  string
	setup string // how it is set up, for the output
	// prefix is the command a server named role ("baseline",
	// "plantstore", or an extra role setupShape was given) is started
	// through; nil: none.
	prefix func(role string) []string
	// generatorCPUs are the CPUs the load generator runs on; nil: those
	// the harness started with.
	generatorCPUs []int
	// report, when set, says what the shape saw once its runs are over.
	report  func()
	cleanup func()
}

var shapeNames = []string{"pinned", "quota", "unpinned"}

// startCPUs are the CPUs the harness was allowed when it started;
// startGOMAXPROCS whether GOMAXPROCS was set by the environment.
var (
	startCPUs          = currentCPUs()
	startGOMAXPROCSEnv = os.Getenv("GOMAXPROCS") != ""
	startGOMAXPROCS    = runtime.GOMAXPROCS(0)
)

func currentCPUs() []int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return nil
	}
	var cpus []int
	for i := range len(set) * 64 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus
}

func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// setupShape prepares a shape; skip says why it cannot run here. Its
// servers are the baseline, plantstore and the extra roles named.
func setupShape(name string, extraRoles ...string) (sh *shape, skip string, err error) {
	sh = &shape{name: name, cleanup: func() {}}
	roles := append([]string{"baseline", "plantstore"}, extraRoles...)
	cpus := startCPUs
	switch name {
	case "unpinned":
		sh.setup = fmt.Sprintf("servers and load generator share CPUs %s, unconfined", cpuList(cpus))
		return sh, "", nil
	case "pinned":
		if len(cpus) < 2 {
			return nil, fmt.Sprintf("the harness may use only one CPU (%s): no core is left for the load generator", cpuList(cpus)), nil
		}
		taskset, err := exec.LookPath("taskset")
		if err != nil {
			return nil, "taskset is not installed (util-linux), so the servers cannot be pinned", nil
		}
		core := strconv.Itoa(cpus[0])
		sh.prefix = func(string) []string { return []string{taskset, "-c", core} }
		sh.generatorCPUs = cpus[1:]
		sh.setup = fmt.Sprintf("each server under `taskset -c %s`; the load generator on CPU(s) %s", core, cpuList(sh.generatorCPUs))
		return sh, "", nil
	case "quota":
		if os.Geteuid() != 0 {
			return nil, "not running as root, so no cgroup can be made", nil
		}
		version, parent, reason := findCPUController()
		if reason != "" {
			return nil, reason, nil
		}
		groups := map[string]string{}
		var made []string
		sh.cleanup = once(func() {
			for _, dir := range made {
				removeCgroup(dir)
			}
		})
		atExit(sh.cleanup)
		id := randomHex(4)
		for _, role := range roles {
			dir := filepath.Join(parent, "plantstore-bench-"+id+"-"+role)
			if err := os.Mkdir(dir, 0o755); err != nil {
				sh.cleanup()
				return nil, fmt.Sprintf("cannot make a cgroup: %v", err), nil
			}
			made = append(made, dir)
			if err := setQuota(version, dir); err != nil {
				sh.cleanup()
				return nil, fmt.Sprintf("cannot set a CPU quota: %v", err), nil
			}
			groups[role] = dir
		}
		sh.prefix = func(role string) []string {
			// $$ is the shell's pid, which exec hands to the server.
			return []string{"/bin/sh", "-c", `echo $$ > '` + groups[role] + `/cgroup.procs' && exec "$0" "$@"`}
		}
		sh.report = func() {
			for _, role := range roles {
				fmt.Printf("%s's cgroup: %s\n", role, throttling(groups[role]))
			}
		}
		sh.generatorCPUs = cpus[len(cpus)-1:]
		quotaFile := "cpu.max 100000 100000"
		if version == 1 {
			quotaFile = "cpu.cfs_quota_us 100000 per cpu.cfs_period_us 100000"
		}
		sh.setup = fmt.Sprintf("each server in a cgroup v%d of its own with a quota of one CPU (%s) under %s, on any CPU; the load generator on CPU %s",
			version, quotaFile, parent, cpuList(sh.generatorCPUs))
		return sh, "", nil
	}
	return nil, "", fmt.Errorf("unknown shape %q (known: %s)", name, strings.Join(shapeNames, ", "))
}

// findCPUController finds where cgroups with a CPU quota can be made: the
// cgroup v2 hierarchy when /sys/fs/cgroup is one and has the cpu
// controller, else cgroup v1's cpu hierarchy. reason says why none.
func findCPUController() (version int, parent, reason string) {
	const root = "/sys/fs/cgroup"
	if data, err := os.ReadFile(root + "/cgroup.controllers"); err == nil {
		if !slices.Contains(strings.Fields(string(data)), "cpu") {
			return 0, "", "cgroup v2 is mounted without the cpu controller"
		}
		// The children of root get the cpu controller only if root passes
		// it on.
		control := root + "/cgroup.subtree_control"
		data, err := os.ReadFile(control)
		if err != nil {
			return 0, "", fmt.Sprintf("cgroup v2: %v", err)
		}
		if !slices.Contains(strings.Fields(string(data)), "cpu") {
			if err := os.WriteFile(control, []byte("+cpu"), 0); err != nil {
				return 0, "", fmt.Sprintf("cgroup v2: cannot enable the cpu controller in %s: %v", control, err)
			}
			fmt.Printf("(enabled the cpu controller in %s, and left it so)\n", control)
		}
		return 2, root, ""
	}
	for _, dir := range []string{root + "/cpu", root + "/cpu,cpuacct"} {
		if _, err := os.Stat(dir + "/cpu.cfs_quota_us"); err == nil {
			return 1, dir, ""
		}
	}
	return 0, "", "no cgroup cpu controller found (neither cgroup v2 with cpu nor v1's cpu.cfs_quota_us)"
}

// setQuota gives the cgroup at dir one CPU: 100 ms in each 100 ms period.
func setQuota(version int, dir string) error {
	if version == 2 {
		return os.WriteFile(dir+"/cpu.max", []byte("100000 100000"), 0)
	}
	if err := os.WriteFile(dir+"/cpu.cfs_period_us", []byte("100000"), 0); err != nil {
		return err
	}
	return os.WriteFile(dir+"/cpu.cfs_quota_us", []byte("100000"), 0)
}

// throttling describes a cgroup's cpu.stat: in how many of its periods
// its quota ran out, and how long its processes were held back.
func throttling(dir string) string {
	data, err := os.ReadFile(dir + "/cpu.stat")
	if err != nil {
		return err.Error()
	}
	stat := map[string]int64{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			stat[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	held := time.Duration(stat["throttled_time"]) + time.Duration(stat["throttled_usec"])*time.Microsecond // v1, v2
	return fmt.Sprintf("quota exhausted in %d of %d periods, held back %s in all",
		stat["nr_throttled"], stat["nr_periods"], held.Round(time.Millisecond))
}

// removeCgroup removes an emptied cgroup, waiting a little for its killed
// processes to leave it.
func removeCgroup(dir string) {
	var err error
	for range 50 {
		if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Printf("could not remove the cgroup %s (remove it by hand: rmdir %s): %v\n", dir, dir, err)
}

// confine runs this process's threads on cpus only, with GOMAXPROCS to
// match, until the returned function is called.
func confine(cpus []int) (restore func(), err error) {
	if err := setAffinity(cpus); err != nil {
		setAffinity(startCPUs)
		return nil, err
	}
	runtime.GOMAXPROCS(len(cpus))
	return func() {
		setAffinity(startCPUs)
		if startGOMAXPROCSEnv {
			runtime.GOMAXPROCS(startGOMAXPROCS)
		} else {
			runtime.SetDefaultGOMAXPROCS()
		}
	}, nil
}

// setAffinity sets every thread's affinity: sched_setaffinity sets one
// thread's, and a new thread inherits its creator's, so every thread is
// set, twice to catch a thread started during the first pass.
func setAffinity(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("sched_setaffinity: %w", err)
			}
		}
	}
	return nil
}
