package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// runCalibration drives the baseline's GET /plants/{id}, in the pinned
// shape, with our load generator, with wrk (when installed) and with
// net/http's client (the generator's former one), one after the other,
// and prints each one's req/s: if ours falls well short of wrk's, the
// generator, not the server, limits what the harness measures.
func runCalibration(c config) error {
	sh, skip, err := setupShape("pinned")
	if err != nil {
		return err
	}
	if skip != "" {
		return fmt.Errorf("-calibrate needs the pinned shape, which cannot run here: %s", skip)
	}
	defer sh.cleanup()
	baseline, bare, err := startBaseline(sh.prefix("baseline"), "")
	if err != nil {
		return err
	}
	defer baseline.stop()
	restore, err := confine(sh.generatorCPUs)
	if err != nil {
		return err
	}
	defer restore()
	fmt.Printf("calibration: the baseline's GET /plants/{id}, %s (baseline GOMAXPROCS %d);\n"+
		"%d connections, closed loop, %s measured each (ours and net/http's after %s of warm-up)\n\n",
		sh.setup, baseline.gomaxprocs, c.connections, c.duration, c.warmup)
	fmt.Println("| load generator | req/s | p99 ms | baseline CPU µs/req | generator CPU µs/req | generator busy |")
	fmt.Println("|---|---|---|---|---|---|")
	var counter atomic.Int64
	get := scenarios(seeded, 0)["get"]
	ours := closedLoop(bare, get, c.connections, c.warmup, c.duration, &counter)
	fmt.Printf("| ours (bench/client.go) | %.0f | %.2f | %.1f | %.1f | %s |\n", ours.RPS, ours.P99, ours.ServerCPUUs, generatorUs(ours), busy(ours))

	wrkRPS := 0.0
	if path, err := exec.LookPath("wrk"); err != nil {
		fmt.Println("| wrk | not installed (apt-get install wrk) | | | | |")
	} else {
		threads := len(sh.generatorCPUs)
		secs := max(1, int(c.duration.Round(time.Second).Seconds()))
		cmd := exec.Command(path, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(max(c.connections, threads)),
			"-d", strconv.Itoa(secs)+"s", "--latency", "-H", "Authorization: Bearer "+bare.token, bare.url+"/plants/1")
		serverBefore, _ := processCPU(bare.pid)
		childrenBefore, begin := childrenCPU(), time.Now()
		out, err := cmd.Output()
		elapsed := time.Since(begin)
		serverAfter, _ := processCPU(bare.pid)
		spent := childrenCPU() - childrenBefore
		if err != nil {
			return fmt.Errorf("wrk: %w\n%s", err, out)
		}
		rps, p99, errs := parseWrk(out)
		wrkRPS = rps
		label := fmt.Sprintf("wrk -t%d -c%d", threads, c.connections)
		if errs != "" {
			label += " (" + errs + ")"
		}
		serverUs, wrkUs := 0.0, 0.0
		if n := rps * float64(secs); n > 0 {
			serverUs = float64((serverAfter - serverBefore).Microseconds()) / n
			wrkUs = float64(spent.Microseconds()) / n
		}
		fmt.Printf("| %s | %.0f | %.2f | %.1f | %.1f | %.0f%% of %d |\n", label, rps, p99, serverUs, wrkUs,
			100*spent.Seconds()/elapsed.Seconds()/float64(threads), threads)
	}
	old := closedLoopWith(newNetHTTPConn, bare, get, c.connections, c.warmup, c.duration, &counter)
	fmt.Printf("| net/http's client (the former generator) | %.0f | %.2f | %.1f | %.1f | %s |\n", old.RPS, old.P99, old.ServerCPUUs, generatorUs(old), busy(old))
	if wrkRPS > 0 {
		fmt.Printf("\nours / wrk: %.2f; net/http's / wrk: %.2f\n", ours.RPS/wrkRPS, old.RPS/wrkRPS)
	}
	return nil
}

// generatorUs is the load generator's CPU time per request in r
// (kernel time included: on loopback, much of TCP's work on both sides).
func generatorUs(r result) float64 {
	if r.RPS == 0 {
		return 0
	}
	return r.GeneratorBusyPct / 100 * float64(r.GeneratorCPUs) / r.RPS * 1e6
}

// parseWrk reads wrk's req/s, its p99 in ms (from --latency) and its
// error lines.
func parseWrk(out []byte) (rps, p99 float64, errs string) {
	var errLines []string
	scan := bufio.NewScanner(bytes.NewReader(out))
	for scan.Scan() {
		f := strings.Fields(scan.Text())
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			rps, _ = strconv.ParseFloat(f[1], 64)
		case len(f) == 2 && f[0] == "99%":
			p99 = wrkMillis(f[1])
		case len(f) > 0 && (f[0] == "Non-2xx" || f[0] == "Socket"):
			errLines = append(errLines, strings.Join(f, " "))
		}
	}
	return rps, p99, strings.Join(errLines, "; ")
}

// wrkMillis converts wrk's "812.00us", "1.23ms" or "1.02s" to ms.
func wrkMillis(s string) float64 {
	for _, u := range []struct {
		suffix string
		ms     float64
	}{{"us", 1e-3}, {"ms", 1}, {"s", 1e3}, {"m", 60e3}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f * u.ms
		}
	}
	return 0
}
