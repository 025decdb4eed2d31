// Command bench is plantstore's load harness. It builds and starts
// "plantstore serve" on loopback with a fresh store, and a bare baseline
// server in a process of its own, and drives both with the same requests:
// closed-loop at a fixed concurrency, then open-loop at a fixed rate. It
// prints each figure and its ratio to the baseline, writes the results as
// JSON, and draws throughput and p99 against concurrency as an SVG.
//
//	go run ./bench                      # the default run, about 3 minutes
//	go run ./bench -duration 2s -sweep= # a quick check
//	go run ./bench -million             # RSS and readiness on 1,000,000 plants
//	go run ./bench -postgres URL        # also PostgreSQL, at 1 and 3 instances
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-serve-baseline" {
		if err := serveBaseline(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type config struct {
	duration, warmup, sweepDuration time.Duration
	connections                     int
	rate                            int
	scenarios                       []string
	sweep                           []int
	out, chart, bin, logLevel       string
	million                         bool
	// postgres is an admin URL of a PostgreSQL server, where the harness
	// creates (and at the end drops) a database per instance count; empty:
	// SQLite only.
	postgres   string
	instances  []int
	pgMaxConns int
}

func run() error {
	var c config
	var scenarioList, sweepList string
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "how long each measurement runs")
	flag.DurationVar(&c.warmup, "warmup", 2*time.Second, "unmeasured time before each measurement")
	flag.IntVar(&c.connections, "connections", 64, "concurrent connections")
	flag.IntVar(&c.rate, "rate", 0, "requests per second of the open-loop runs (0: half the slower target's closed-loop rate)")
	flag.StringVar(&scenarioList, "scenarios", "create,get,list,mixed", "scenarios to run")
	flag.StringVar(&sweepList, "sweep", "1,8,64,256", "connection counts for the chart (create and get, closed loop); empty to skip")
	flag.DurationVar(&c.sweepDuration, "sweep-duration", 3*time.Second, "how long each sweep point runs")
	flag.StringVar(&c.out, "out", "docs/benchmarks/results.json", "where to write the results")
	flag.StringVar(&c.chart, "chart", "docs/benchmarks/throughput.svg", "where to draw the chart (empty: nowhere)")
	flag.StringVar(&c.bin, "bin", "", "a plantstore binary to use (default: build ./cmd/plantstore)")
	flag.StringVar(&c.logLevel, "log-level", "info", "plantstore's --log-level (info writes an access log line per request, as in production)")
	flag.BoolVar(&c.million, "million", false, "measure RSS and readiness on a store of 1,000,000 plants instead")
	flag.StringVar(&c.postgres, "postgres", "", "also measure plantstore on PostgreSQL: an admin `URL` (postgres://...) of a running server, where the harness creates a fresh database per instance count and drops it at the end")
	instanceList := flag.String("instances", "1,3", "with -postgres: how many plantstore serve processes share the database, one target per count; connections are spread round-robin over them")
	flag.IntVar(&c.pgMaxConns, "pg-max-conns", 0, "with -postgres: each instance's --db-max-conns (0: plantstore's default)")
	redraw := flag.Bool("redraw", false, "only draw -chart again from the results in -out")
	flag.Parse()
	c.scenarios = strings.Split(scenarioList, ",")
	for _, s := range strings.Split(sweepList, ",") {
		if s = strings.TrimSpace(s); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return fmt.Errorf("-sweep %q: %w", sweepList, err)
			}
			c.sweep = append(c.sweep, n)
		}
	}

	if c.postgres != "" {
		for _, s := range strings.Split(*instanceList, ",") {
			if s = strings.TrimSpace(s); s != "" {
				n, err := strconv.Atoi(s)
				if err != nil || n < 1 || n > 64 {
					return fmt.Errorf("-instances %q: each count must be between 1 and 64", *instanceList)
				}
				c.instances = append(c.instances, n)
			}
		}
		if len(c.instances) == 0 {
			return fmt.Errorf("-instances is empty")
		}
		if c.million {
			return fmt.Errorf("-million runs on SQLite only; drop -postgres")
		}
	}

	if *redraw {
		return redrawChart(c)
	}
	dir, err := os.MkdirTemp("", "plantstore-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if c.bin == "" {
		c.bin = filepath.Join(dir, "plantstore")
		fmt.Println("building plantstore ...")
		build := exec.Command("go", "build", "-o", c.bin, "./cmd/plantstore")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build (run the harness from the repository's root): %w", err)
		}
	}
	if c.million {
		return runMillion(c, dir)
	}
	return runComparison(c, dir)
}

// process is a server the harness started.
type process struct {
	cmd *exec.Cmd
	url string
}

func (p *process) stop() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// startServer runs cmd and waits for a line "listening ADDR" on stdout, or
// a JSON log line with msg "listening" in logFile.
func startServer(cmd *exec.Cmd, logFile string) (*process, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		scan := bufio.NewScanner(stdout)
		for scan.Scan() {
			if a, ok := strings.CutPrefix(scan.Text(), "listening "); ok {
				addr <- a
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case a := <-addr:
			return &process{cmd: cmd, url: "http://" + a}, nil
		case <-time.After(20 * time.Millisecond):
		}
		if logFile == "" {
			continue
		}
		data, _ := os.ReadFile(logFile)
		for line := range strings.SplitSeq(string(data), "\n") {
			var entry struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "listening" {
				return &process{cmd: cmd, url: "http://" + entry.Addr}, nil
			}
		}
	}
	cmd.Process.Kill()
	return nil, fmt.Errorf("%s did not start listening within 30 s", cmd.Path)
}

func startPlantstore(c config, dir, db string) (*process, error) {
	return startPlantstoreLog(c, dir, db, "serve.log")
}

// startPlantstoreLog starts plantstore with its log in dir/logName.
func startPlantstoreLog(c config, dir, db, logName string, args ...string) (*process, error) {
	logFile := filepath.Join(dir, logName)
	log, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	args = append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--log-level", c.logLevel}, args...)
	cmd := exec.Command(c.bin, args...)
	cmd.Stderr = log
	return startServer(cmd, logFile)
}

func createToken(c config, db string) (string, error) {
	out, err := exec.Command(c.bin, "token", "create", "--name", "bench-"+randomHex(4), "--db", db).Output()
	if err != nil {
		return "", fmt.Errorf("token create: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// peakRSS is the process's high-water resident set (VmHWM), in MiB.
func peakRSS(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// seed creates plants 1..n through the API.
func seed(t target, n int64) error {
	client := &http.Client{Transport: newTransport(64)}
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 64 {
		wg.Go(func() {
			for id := next.Add(1); id <= n; id = next.Add(1) {
				body := fmt.Appendf(nil, `{"id":%d,"name":"seeded plant %d","tag":"seed"}`, id, id)
				if status, err := send(context.Background(), client, t, "POST", "/plants", body); err != nil || status != 200 {
					failed.Store(fmt.Errorf("seeding plant %d: %d %v", id, status, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return err
	}
	return nil
}

const seeded = 10_000

// startFresh issues a token on a new store at db and starts plantstore on
// it.
func startFresh(c config, dir, db string) (*process, target, error) {
	token, err := createToken(c, db)
	if err != nil {
		return nil, target{}, err
	}
	server, err := startPlantstore(c, dir, db)
	if err != nil {
		return nil, target{}, err
	}
	return server, target{name: "plantstore", url: server.url, token: token, pid: server.cmd.Process.Pid, engine: "sqlite", instances: 1}, nil
}

func runComparison(c config, dir string) error {
	server, store, err := startFresh(c, dir, filepath.Join(dir, "bench.db"))
	if err != nil {
		return err
	}
	defer server.stop()
	stores := []target{store}
	if c.postgres != "" {
		// Told apart from PostgreSQL's rows; the default run keeps its
		// labels.
		stores[0].name = "plantstore (sqlite)"
		for _, n := range c.instances {
			pg, stop, err := startPostgres(c, dir, n)
			// stop drops the database: it runs even when the start failed
			// half-way.
			defer stop()
			if err != nil {
				return err
			}
			stores = append(stores, pg)
		}
	}
	baseToken := randomHex(16)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	baseline, err := startServer(exec.Command(self, "-serve-baseline", baseToken), "")
	if err != nil {
		return err
	}
	defer baseline.stop()

	bare := target{name: "baseline", url: baseline.url, token: baseToken, pid: baseline.cmd.Process.Pid}
	for _, t := range stores {
		if len(stores) > 1 {
			fmt.Printf("seeding %d plants in %s ...\n", seeded, t.name)
		} else {
			fmt.Printf("seeding %d plants ...\n", seeded)
		}
		if err := seed(t, seeded); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	var counter atomic.Int64
	counter.Store(1 << 40) // created ids start far above the seeded ones
	all := scenarios(seeded, 0)
	var results []result
	measure := func(t target, r result) result {
		r.PeakRSSMiB, r.PeakRSSEachMiB = t.peakRSS()
		results = append(results, r)
		return r
	}
	fmt.Printf("\n%d connections, %s per run after %s of warm-up; ratios are plantstore / baseline\n", c.connections, c.duration, c.warmup)
	if c.postgres != "" {
		fmt.Printf("PostgreSQL: a fresh database per instance count, each instance's pool %s; with several instances,\n"+
			"the connections are spread round-robin over them (each sticks to one) and peak RSS is the maximum over the instances.\n"+
			"The open-loop rate is half the slowest target's closed-loop rate. Everything (load generator, baseline,\n"+
			"every plantstore instance, PostgreSQL) shares this machine's %d CPUs.\n",
			poolSize(c), runtime.NumCPU())
	}
	fmt.Println()
	fmt.Println("| scenario | mode | target | req/s | p50 ms | p99 ms | p99.9 ms | errors | peak RSS MiB | req/s ratio | p99 ratio |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, name := range c.scenarios {
		s, ok := all[name]
		if !ok {
			return fmt.Errorf("unknown scenario %q", name)
		}
		b := measure(bare, closedLoop(bare, s, c.connections, c.warmup, c.duration, &counter))
		var ps []result
		for _, t := range stores {
			ps = append(ps, measure(t, closedLoop(t, s, c.connections, c.warmup, c.duration, &counter)))
		}
		printRows(b, ps...)
		rate := c.rate
		if rate == 0 {
			slowest := b.RPS
			for _, p := range ps {
				slowest = min(slowest, p.RPS)
			}
			rate = max(1, int(slowest/2))
		}
		b = measure(bare, openLoop(bare, s, c.connections, rate, c.warmup, c.duration, &counter))
		ps = ps[:0]
		for _, t := range stores {
			ps = append(ps, measure(t, openLoop(t, s, c.connections, rate, c.warmup, c.duration, &counter)))
		}
		printRows(b, ps...)
	}
	for _, conns := range c.sweep {
		for _, name := range []string{"create", "get"} {
			for _, t := range []target{bare, store} {
				r := closedLoop(t, all[name], conns, c.warmup/2, c.sweepDuration, &counter)
				r.Sweep = true
				measure(t, r)
			}
		}
		fmt.Printf("sweep: %d connections done\n", conns)
	}
	fmt.Println()
	for _, t := range stores {
		peak, each := t.peakRSS()
		name := "plantstore"
		if len(stores) > 1 {
			name = t.name
		}
		fmt.Printf("%s peak RSS over the whole run: %.1f MiB", name, peak)
		if len(each) > 0 {
			fmt.Printf(" (the maximum over its instances: %s MiB)", joinMiB(each))
		}
		fmt.Println()
	}
	data, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(c.out, data, 0o644); err != nil {
		return err
	}
	fmt.Println("results written to", c.out)
	if c.chart != "" && len(c.sweep) > 0 {
		if err := os.WriteFile(c.chart, drawChart(results, c.sweep), 0o644); err != nil {
			return err
		}
		fmt.Println("chart drawn in", c.chart)
	}
	return nil
}

func redrawChart(c config) error {
	data, err := os.ReadFile(c.out)
	if err != nil {
		return err
	}
	var results []result
	if err := json.Unmarshal(data, &results); err != nil {
		return fmt.Errorf("%s: %w", c.out, err)
	}
	return os.WriteFile(c.chart, drawChart(results, c.sweep), 0o644)
}

// printRows prints the baseline's row, then each plantstore target's with
// its ratios to the baseline.
func printRows(b result, ps ...result) {
	mode := "closed"
	if b.Mode == "open" {
		mode = fmt.Sprintf("open, %d/s", b.Rate)
	}
	row := func(r result, ratios string) {
		fmt.Printf("| %s | %s | %s | %.0f | %.2f | %.2f | %.2f | %d | %.1f | %s |\n",
			r.Scenario, mode, r.Target, r.RPS, r.P50, r.P99, r.P999, r.Errors, r.PeakRSSMiB, ratios)
	}
	row(b, "1.00 | 1.00")
	for _, p := range ps {
		row(p, fmt.Sprintf("%.2f | %.2f", p.RPS/b.RPS, p.P99/b.P99))
	}
}

func joinMiB(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(s, ", ")
}
