package cpulimit

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeSystem lays out /proc/self and cgroup files under a temporary root.
func fakeSystem(t *testing.T, files map[string]string) system {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return system{root: root}
}

// A hybrid system like this project's machine: v1 controllers, a v2
// hierarchy without the cpu controller.
const hybridMounts = `25 24 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct
28 25 0:25 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
`

func TestQuota(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		cpus    float64
		limited bool
	}{
		{
			name: "cgroup v1, a quota of one CPU on the process's cgroup",
			files: map[string]string{
				"proc/self/cgroup":                                    "12:memory:/web\n3:cpu,cpuacct:/web/api\n0::/\n",
				"proc/self/mountinfo":                                 hybridMounts,
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":          "-1\n",
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us":         "100000\n",
				"sys/fs/cgroup/cpu,cpuacct/web/cpu.cfs_quota_us":      "-1\n",
				"sys/fs/cgroup/cpu,cpuacct/web/cpu.cfs_period_us":     "100000\n",
				"sys/fs/cgroup/cpu,cpuacct/web/api/cpu.cfs_quota_us":  "100000\n",
				"sys/fs/cgroup/cpu,cpuacct/web/api/cpu.cfs_period_us": "100000\n",
			},
			cpus: 1, limited: true,
		},
		{
			name: "cgroup v1, a tighter quota on a parent",
			files: map[string]string{
				"proc/self/cgroup":                                    "3:cpu,cpuacct:/web/api\n",
				"proc/self/mountinfo":                                 hybridMounts,
				"sys/fs/cgroup/cpu,cpuacct/web/cpu.cfs_quota_us":      "50000\n",
				"sys/fs/cgroup/cpu,cpuacct/web/cpu.cfs_period_us":     "100000\n",
				"sys/fs/cgroup/cpu,cpuacct/web/api/cpu.cfs_quota_us":  "400000\n",
				"sys/fs/cgroup/cpu,cpuacct/web/api/cpu.cfs_period_us": "100000\n",
			},
			cpus: 0.5, limited: true,
		},
		{
			name: "cgroup v1, no quota",
			files: map[string]string{
				"proc/self/cgroup":                            "3:cpu,cpuacct:/\n",
				"proc/self/mountinfo":                         hybridMounts,
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":  "-1\n",
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
			},
		},
		{
			name: "cgroup v2, cpu.max of one and a half CPUs",
			files: map[string]string{
				"proc/self/cgroup":                    "0::/kubepods/pod1\n",
				"proc/self/mountinfo":                 "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
				"sys/fs/cgroup/kubepods/cpu.max":      "max 100000\n",
				"sys/fs/cgroup/kubepods/pod1/cpu.max": "150000 100000\n",
			},
			cpus: 1.5, limited: true,
		},
		{
			name: "cgroup v2 in a container's cgroup namespace: the mount's root is the process's cgroup",
			files: map[string]string{
				"proc/self/cgroup":      "0::/\n",
				"proc/self/mountinfo":   "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
				"sys/fs/cgroup/cpu.max": "100000 100000\n",
			},
			cpus: 1, limited: true,
		},
		{
			name: "cgroup v1 in a container: the mount's root is the process's cgroup, a path with a space",
			files: map[string]string{
				"proc/self/cgroup":                    "3:cpu:/docker/a b\n",
				"proc/self/mountinfo":                 `40 25 0:27 /docker/a\040b /sys/fs/cgroup/cpu ro - cgroup cgroup rw,cpu` + "\n",
				"sys/fs/cgroup/cpu/cpu.cfs_quota_us":  "200000\n",
				"sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
			},
			cpus: 2, limited: true,
		},
		{
			name: "cgroup v2 without a cpu.max anywhere",
			files: map[string]string{
				"proc/self/cgroup":    "0::/user.slice\n",
				"proc/self/mountinfo": "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			},
		},
		{
			name:  "no cgroups at all",
			files: map[string]string{"proc/self/mountinfo": ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpus, limited, err := fakeSystem(t, tt.files).quota()
			if err != nil {
				t.Fatal(err)
			}
			if cpus != tt.cpus || limited != tt.limited {
				t.Fatalf("quota: %v CPUs, limited %t; want %v, %t", cpus, limited, tt.cpus, tt.limited)
			}
		})
	}
}

func TestQuotaReportsUnreadableFiles(t *testing.T) {
	s := fakeSystem(t, map[string]string{
		"proc/self/cgroup":        "0::/a\n",
		"proc/self/mountinfo":     "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
		"sys/fs/cgroup/a/cpu.max": "lots 100000\n",
	})
	if _, _, err := s.quota(); err == nil {
		t.Fatal("a cpu.max of no number gave no error")
	}
}
