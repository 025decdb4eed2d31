package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// What the harness reads around each measured interval besides latency:
// the load generator's own CPU time (getrusage), the server's CPU time
// (/proc/PID/stat) and plantstore's group-commit batch sizes (its
// Prometheus metrics).

// batchMetrics are the histograms of group-commit batch sizes the harness
// knows, by engine, and the durable baseline's sum and count of its
// batches; a target's mean batch sums over whichever it exposes.
var batchMetrics = []string{"plantstore_store_group_commit_batch_size", "durable_baseline_batch_size"}

// usage is what was read at one instant: CPU times, quick to read, so
// that the interval they bound is the measured one.
type usage struct {
	at        time.Time
	generator time.Duration // this process's CPU time so far
	cpus      int           // the CPUs this process may run on
	server    time.Duration // the target's CPU time so far, all instances
	serverOK  bool
}

func takeUsage(t target) usage {
	u := usage{generator: selfCPU(), cpus: allowedCPUs(), serverOK: true}
	pids := t.pids
	if len(pids) == 0 {
		pids = []int{t.pid}
	}
	for _, pid := range pids {
		cpu, ok := processCPU(pid)
		u.server += cpu
		u.serverOK = u.serverOK && ok
	}
	u.at = time.Now()
	return u
}

// addUsage fills r's CPU figures from the usage read before and after its
// measured interval.
func (r *result) addUsage(before, after usage) {
	elapsed := after.at.Sub(before.at)
	r.GeneratorCPUs = after.cpus
	if elapsed > 0 && after.cpus > 0 {
		r.GeneratorBusyPct = 100 * (after.generator - before.generator).Seconds() / elapsed.Seconds() / float64(after.cpus)
	}
	if before.serverOK && after.serverOK && r.Requests > 0 {
		r.ServerCPUUs = float64((after.server - before.server).Microseconds()) / float64(r.Requests)
	}
}

// batches are the batch-size histograms' _sum and _count, summed over
// the target's instances.
type batches struct{ sum, count float64 }

// scrapeBatches reads t's batch-size histograms aside, since a server
// under load may be slow to answer; the result arrives on the channel
// (zero when s creates nothing or t has no metrics).
func scrapeBatches(t target, s scenario) <-chan batches {
	ch := make(chan batches, 1)
	if !s.creates || len(t.metrics) == 0 {
		ch <- batches{}
		return ch
	}
	go func() {
		var b batches
		for _, url := range t.metrics {
			m := scrapeMetrics(url)
			for _, name := range batchMetrics {
				b.sum += m[name+"_sum"]
				b.count += m[name+"_count"]
			}
		}
		ch <- b
	}()
	return ch
}

// addBatches fills r's mean batch from the histograms read around its
// measured interval.
func (r *result) addBatches(before, after batches) {
	if n := after.count - before.count; n > 0 {
		r.MeanBatch = (after.sum - before.sum) / n
	}
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childrenCPU is the CPU time of this process's waited-for children.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// processCPU is a process's user+system CPU time so far, all its threads.
func processCPU(pid int) (time.Duration, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces, so count the
	// fields after its closing parenthesis; utime and stime are the 14th
	// and 15th fields, the 12th and 13th after it.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * clockTick, true
}

// allowedCPUs is how many CPUs this process may run on.
func allowedCPUs() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return 0
	}
	return set.Count()
}

var metricsClient = &http.Client{Timeout: 5 * time.Second}

// scrapeMetrics reads a Prometheus text page into value by series name,
// summing the series of a name over their labels. Empty when unreachable.
func scrapeMetrics(url string) map[string]float64 {
	m := map[string]float64{}
	resp, err := metricsClient.Get(url)
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	scan := bufio.NewScanner(resp.Body)
	scan.Buffer(nil, 1<<20)
	for scan.Scan() {
		line := scan.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			// Labels may hold spaces: the value follows the closing brace.
			j := strings.LastIndexByte(line, '}')
			name, rest, ok = line[:i], strings.TrimSpace(line[j+1:]), j > i
		}
		if !ok {
			continue
		}
		value, _, _ := strings.Cut(strings.TrimSpace(rest), " ") // an optional timestamp follows
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			m[name] += v
		}
	}
	return m
}
