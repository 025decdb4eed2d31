// Package cpulimit reads the CPU quota a Linux cgroup puts on this
// process: how many CPUs' worth of time it may use, the tightest of the
// quotas on its cgroup and the cgroups above it (cgroup v1's
// cpu.cfs_quota_us over cpu.cfs_period_us, v2's cpu.max).
//
// The Go runtime reads the same files to choose GOMAXPROCS, but rounds a
// quota up and gives at least 2; serve uses Quota to give a process
// limited to one CPU one P (docs/configuration.md "CPU").
package cpulimit

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Quota returns the CPUs' worth of time this process may use, and false
// when no cgroup quota limits it (or the system has no cgroups).
func Quota() (cpus float64, limited bool, err error) {
	return system{root: "/"}.quota()
}

// system is where the /proc and /sys files are read: "/", or a
// directory laid out like it in the tests.
type system struct{ root string }

func (s system) path(p string) string { return filepath.Join(s.root, p) }

func (s system) quota() (float64, bool, error) {
	dir, version, err := s.cpuCgroup()
	if err != nil || dir.leaf == "" {
		return 0, false, err
	}
	// The tightest quota from the process's cgroup up to the hierarchy's
	// root: a parent's quota bounds every cgroup under it.
	cpus, limited := math.Inf(1), false
	for {
		c, ok, err := readQuota(dir.leaf, version)
		if err != nil {
			return 0, false, err
		}
		if ok && c < cpus {
			cpus, limited = c, true
		}
		if dir.leaf == dir.mount {
			break
		}
		dir.leaf = filepath.Dir(dir.leaf)
	}
	if !limited {
		return 0, false, nil
	}
	return cpus, true, nil
}

// cgroupDir is the process's CPU cgroup as a directory (leaf) in the
// mounted hierarchy (mount).
type cgroupDir struct{ leaf, mount string }

// cpuCgroup finds the directory of the process's cgroup in the hierarchy
// with the cpu controller: cgroup v1's when one is mounted with it (a
// hybrid system has v2 mounted too, without the controller), else v2's.
// An empty leaf means neither is there.
func (s system) cpuCgroup() (cgroupDir, int, error) {
	v1, v2, err := s.cgroupPaths()
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return cgroupDir{}, 0, nil // no cgroups
		}
		return cgroupDir{}, 0, err
	}
	f, err := os.Open(s.path("/proc/self/mountinfo"))
	if err != nil {
		return cgroupDir{}, 0, err
	}
	defer f.Close()
	var found cgroupDir
	version := 0
	lines := bufio.NewScanner(f)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		m, ok := parseMount(lines.Text())
		if !ok {
			continue
		}
		switch {
		case m.fstype == "cgroup" && v1 != "" && hasOption(m.superOptions, "cpu"):
			if leaf, ok := under(m, v1); ok {
				return cgroupDir{leaf: s.path(leaf), mount: s.path(m.point)}, 1, nil
			}
		case m.fstype == "cgroup2" && v2 != "" && version == 0:
			if leaf, ok := under(m, v2); ok {
				found, version = cgroupDir{leaf: s.path(leaf), mount: s.path(m.point)}, 2
			}
		}
	}
	if err := lines.Err(); err != nil {
		return cgroupDir{}, 0, err
	}
	return found, version, nil
}

// cgroupPaths reads /proc/self/cgroup: the process's cgroup in the v1
// hierarchy with the cpu controller, and in the v2 hierarchy.
func (s system) cgroupPaths() (v1, v2 string, err error) {
	data, err := os.ReadFile(s.path("/proc/self/cgroup"))
	if err != nil {
		return "", "", err
	}
	for line := range strings.Lines(string(data)) {
		// hierarchy-ID:controller-list:cgroup-path
		_, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), ":")
		controllers, path, ok := strings.Cut(rest, ":")
		switch {
		case !ok:
		case controllers == "":
			v2 = path
		case hasOption(controllers, "cpu"):
			v1 = path
		}
	}
	return v1, v2, nil
}

type mount struct {
	root, point, fstype, superOptions string
}

// parseMount parses a line of /proc/self/mountinfo (proc(5)):
// "36 35 98:0 /root /point rw,noatime master:1 - cgroup cgroup rw,cpu".
func parseMount(line string) (mount, bool) {
	before, after, ok := strings.Cut(line, " - ")
	if !ok {
		return mount{}, false
	}
	f, g := strings.Fields(before), strings.Fields(after)
	if len(f) < 5 || len(g) < 3 {
		return mount{}, false
	}
	return mount{root: unescape(f[3]), point: unescape(f[4]), fstype: g[0], superOptions: g[2]}, true
}

// under returns where the cgroup at path (as /proc/self/cgroup names it)
// is in mount m, if it is there at all.
func under(m mount, path string) (string, bool) {
	rel, ok := strings.CutPrefix(path, m.root)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/") && m.root != "/") {
		return "", false
	}
	return filepath.Join(m.point, rel), true
}

// unescape undoes mountinfo's octal escapes of spaces, tabs, newlines and
// backslashes ("\040").
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hasOption(list, option string) bool {
	for o := range strings.SplitSeq(list, ",") {
		if o == option {
			return true
		}
	}
	return false
}

// readQuota reads the quota of the cgroup at dir; ok is false when it has
// none (or no files for one: the root of a v2 hierarchy).
func readQuota(dir string, version int) (cpus float64, ok bool, err error) {
	if version == 2 {
		data, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if errors.Is(err, os.ErrNotExist) {
			return 0, false, nil
		} else if err != nil {
			return 0, false, err
		}
		quota, period, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
		if quota == "max" {
			return 0, false, nil
		}
		return ratio(dir+"/cpu.max", quota, period)
	}
	quota, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, err
	}
	if strings.TrimSpace(string(quota)) == "-1" {
		return 0, false, nil
	}
	period, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, false, err
	}
	return ratio(dir+"/cpu.cfs_quota_us", strings.TrimSpace(string(quota)), strings.TrimSpace(string(period)))
}

func ratio(file, quota, period string) (float64, bool, error) {
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false, fmt.Errorf("%s: cannot read a quota in %q per %q", file, quota, period)
	}
	return float64(q) / float64(p), true, nil
}
