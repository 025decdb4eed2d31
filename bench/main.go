// Command bench is plantstore's load harness. It builds and starts
// "plantstore serve" on loopback with a fresh store, and a bare baseline
// server in a process of its own, and drives both with the same requests:
// closed-loop at a fixed concurrency, then open-loop at a fixed rate. It
// does so in each of three shapes (shapes.go): the servers pinned to one
// core, the servers each in a cgroup with a quota of one CPU, and
// everything unpinned; both servers start afresh for each shape. It prints
// each figure and its ratio to the baseline, the servers' CPU time per
// request, plantstore's mean group-commit batch, how busy the load
// generator was, and each target met or not; writes the results as JSON,
// and draws throughput and p99 against concurrency as an SVG.
//
//	go run ./bench                      # the default run, about 7 minutes
//	go run ./bench -duration 2s -sweep= # a quick check
//	go run ./bench -shapes unpinned     # one shape only
//	go run ./bench -calibrate           # wrk against our load generator
//	go run ./bench -million             # RSS and readiness on 1,000,000 plants
//	go run ./bench -postgres URL        # also PostgreSQL, at 1 and 3 instances
//	go run ./bench -events -before REV  # the change feed's costs (events.go)
//	go run ./bench -webhooks -before REV # webhook delivery rates and costs (webhooks.go)
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
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if (len(os.Args) == 3 || len(os.Args) == 4) && os.Args[1] == "-serve-baseline" {
		dir := "" // the durable baseline's, when given
		if len(os.Args) == 4 {
			dir = os.Args[3]
		}
		if err := serveBaseline(os.Args[2], dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	// Interrupted, the harness still stops its servers, removes its
	// cgroups and drops its PostgreSQL databases.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "bench: %v: cleaning up\n", sig)
		runCleanups()
		os.Exit(1)
	}()
	err := run()
	runCleanups()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

var cleanups struct {
	sync.Mutex
	fns []func()
}

// atExit has f run when the harness ends, however it ends; the last
// registered runs first.
func atExit(f func()) {
	cleanups.Lock()
	defer cleanups.Unlock()
	cleanups.fns = append(cleanups.fns, f)
}

func runCleanups() {
	cleanups.Lock()
	defer cleanups.Unlock()
	for i := len(cleanups.fns) - 1; i >= 0; i-- {
		cleanups.fns[i]()
	}
	cleanups.fns = nil
}

// once is f, run at most once however often it is called.
func once(f func()) func() {
	var o sync.Once
	return func() { o.Do(f) }
}

type config struct {
	duration, warmup, sweepDuration time.Duration
	connections                     int
	rate                            int
	// rounds is how many closed-loop runs each target gets per scenario,
	// the targets alternating; the report keeps each one's best.
	rounds                    int
	scenarios                 []string
	sweep                     []int
	shapes                    []string
	out, chart, bin, logLevel string
	million                   bool
	// postgres is an admin URL of a PostgreSQL server, where the harness
	// creates (and at the end drops) a database per instance count; empty:
	// SQLite only.
	postgres   string
	instances  []int
	pgMaxConns int
	// durableBaseline adds the durable baseline (bench/baseline.go's
	// durableLog) to each shape's targets.
	durableBaseline bool
}

const usageText = `Usage: go run ./bench [flags]   (from the repository's root)

Builds plantstore, and for each shape starts "plantstore serve" on a fresh
SQLite store (metrics on), seeds it with 10,000 plants (unconfined, then
restarts it as the shape says), starts the bare baseline (bench/baseline.go)
in a process of its own, and drives both with the same requests. Shapes:

  pinned    each server under "taskset -c FIRST-CPU" (GOMAXPROCS 1); the
            load generator on the other CPUs. Skipped without taskset or
            with a single CPU.
  quota     each server in a cgroup of its own with a one-CPU quota
            (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us; 100 ms per 100 ms),
            on any CPU; the load generator on one core. Needs root and the
            cpu controller; skipped, saying why, otherwise. The cgroups
            are removed at the end, even on failure or interrupt.
  unpinned  everything shares every CPU; the sweep runs here only, as do
            -million and -postgres.

Closed-loop runs go in rounds (-rounds, 2 by default), the targets taking
turns; each target's best round counts, and the row lists every round's
req/s. Each run reports req/s, p50/p99/p99.9, errors, peak RSS, the servers' CPU
time per request (/proc/PID/stat), plantstore's mean group-commit batch on
runs that create (its /metrics), and how busy the load generator was (a
run where it was over 90% busy is marked suspect: it may measure the
generator, not the server). Each shape ends with its targets, met or not.
-calibrate drives the baseline's GET with wrk and with the generator, in
the pinned shape, to show whether the generator understates the baseline.

Flags:
`

func run() error {
	var c config
	var scenarioList, sweepList, shapeList string
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usageText)
		flag.PrintDefaults()
	}
	flag.DurationVar(&c.duration, "duration", 5*time.Second, "how long each measurement runs")
	flag.DurationVar(&c.warmup, "warmup", time.Second, "unmeasured time before each measurement")
	flag.IntVar(&c.connections, "connections", 64, "concurrent connections")
	flag.IntVar(&c.rounds, "rounds", 2, "closed-loop runs of each target per scenario, alternating the targets; each target's best counts (the issue's method: best of two, all servers in one run)")
	flag.IntVar(&c.rate, "rate", 0, "requests per second of the open-loop runs (0: half the slower target's closed-loop rate)")
	flag.StringVar(&scenarioList, "scenarios", "list,create,get,mixed", "scenarios to run, in order (list first: its pages come from the replica only while the store is under its bound, which the creates can pass)")
	flag.StringVar(&shapeList, "shapes", strings.Join(shapeNames, ","), "shapes to run, in order: pinned, quota, unpinned")
	flag.StringVar(&sweepList, "sweep", "1,8,64,256", "connection counts for the chart (create and get, closed loop, unpinned shape only); empty to skip")
	flag.DurationVar(&c.sweepDuration, "sweep-duration", 3*time.Second, "how long each sweep point runs")
	flag.StringVar(&c.out, "out", "docs/benchmarks/results.json", "where to write the results")
	flag.StringVar(&c.chart, "chart", "docs/benchmarks/throughput.svg", "where to draw the chart, from the unpinned shape's sweep (empty: nowhere)")
	flag.StringVar(&c.bin, "bin", "", "a plantstore binary to use (default: build ./cmd/plantstore)")
	flag.StringVar(&c.logLevel, "log-level", "info", "plantstore's --log-level (info writes an access log line per request, as in production)")
	calibrate := flag.Bool("calibrate", false, "only compare load generators (wrk, ours, net/http's) on the baseline's GET in the pinned shape, for -duration each")
	flag.BoolVar(&c.million, "million", false, "measure RSS and readiness on a store of 1,000,000 plants instead (unpinned shape only)")
	flag.StringVar(&c.postgres, "postgres", "", "also measure plantstore on PostgreSQL (in the unpinned shape only): an admin `URL` (postgres://...) of a running server, where the harness creates a fresh database per instance count and drops it at the end")
	instanceList := flag.String("instances", "1,3", "with -postgres: how many plantstore serve processes share the database, one target per count; connections are spread round-robin over them")
	flag.IntVar(&c.pgMaxConns, "pg-max-conns", 0, "with -postgres: each instance's --db-max-conns (0: plantstore's default)")
	flag.BoolVar(&c.durableBaseline, "durable-baseline", false, "also measure the durable baseline: the bare baseline whose creates are group-committed to a file with one write and one fdatasync a batch before the answer (no database), to tell the cost of durability on this machine from plantstore's own")
	history := flag.Bool("history", false, "only print, from the results FILES named after the options (full runs' -out), every run's ratios against the targets side by side and how often each target was met, in the order git first committed the files")
	redraw := flag.Bool("redraw", false, "only draw -chart again from the results in -out")
	events := flag.Bool("events", false, "only measure the change feed's costs in each shape: creates against a binary from before it (-before), and with -streams streams open against none (results in docs/benchmarks/events.json unless -out is given)")
	before := flag.String("before", "", "with -events: a git `REV` from before the change feed, to build and measure against")
	streams := flag.Int("streams", 100, "with -events: how many streams to open")
	webhooks := flag.Bool("webhooks", false, "only measure webhook deliveries, in each of -shapes: the rate to one subscriber from a backlog, its receiver answering at once and after -webhook-delay, against the binary of -before if given; and creates with one subscriber against none (results in docs/benchmarks/webhooks.json unless -out is given)")
	hookBacklog := flag.Int("webhook-backlog", 20_000, "with -webhooks: the events queued before the receiver lets them through")
	hookDelay := flag.Duration("webhook-delay", 50*time.Millisecond, "with -webhooks: how long the slow receiver takes to answer")
	hookWindow := flag.Duration("webhook-window", 15*time.Second, "with -webhooks: the longest a delivery run lasts (a slow baseline is measured over this window)")
	hookConcurrency := flag.Int("webhook-concurrency", 64, "with -webhooks: the current binary's --webhook-concurrency")
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
	for _, s := range strings.Split(shapeList, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if !slices.Contains(shapeNames, s) {
				return fmt.Errorf("-shapes: unknown shape %q (known: %s)", s, strings.Join(shapeNames, ", "))
			}
			c.shapes = append(c.shapes, s)
		}
	}

	if c.rounds < 1 {
		return fmt.Errorf("-rounds %d: at least one", c.rounds)
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

	if *history {
		return runHistory(flag.Args())
	}
	if *redraw {
		return redrawChart(c)
	}
	if *calibrate {
		return runCalibration(c)
	}
	dir, err := os.MkdirTemp("", "plantstore-bench")
	if err != nil {
		return err
	}
	atExit(func() { os.RemoveAll(dir) })
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
	if *webhooks {
		if !outSet() {
			c.out = "docs/benchmarks/webhooks.json"
		}
		return runWebhookCosts(c, dir, *before, *hookBacklog, *hookDelay, *hookWindow, *hookConcurrency)
	}
	if *events {
		if !outSet() {
			c.out = "docs/benchmarks/events.json"
		}
		return runEventCosts(c, dir, *before, *streams)
	}
	if len(c.shapes) == 0 {
		return fmt.Errorf("-shapes is empty")
	}
	return runComparison(c, dir)
}

// process is a server the harness started.
type process struct {
	cmd *exec.Cmd
	url string
	// metricsURL is plantstore's /metrics (empty for the baseline);
	// gomaxprocs is the baseline's GOMAXPROCS, as it reported.
	metricsURL string
	gomaxprocs int
	stopOnce   sync.Once
}

func (p *process) stop() {
	p.stopOnce.Do(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
}

// command is name with args, started through prefix when there is one.
func command(prefix []string, name string, args ...string) *exec.Cmd {
	if len(prefix) == 0 {
		return exec.Command(name, args...)
	}
	return exec.Command(prefix[0], slices.Concat(prefix[1:], []string{name}, args)...)
}

// startServer runs cmd and waits for a line "listening ADDR" on stdout, or
// a JSON log line with msg "listening" in logFile; there, it also looks
// for the line "metrics listening" when wantMetrics.
func startServer(cmd *exec.Cmd, logFile string, wantMetrics bool) (*process, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd}
	atExit(p.stop)
	addr := make(chan string, 1)
	go func() {
		scan := bufio.NewScanner(stdout)
		for scan.Scan() {
			if n, ok := strings.CutPrefix(scan.Text(), "gomaxprocs "); ok {
				p.gomaxprocs, _ = strconv.Atoi(n)
			}
			if a, ok := strings.CutPrefix(scan.Text(), "listening "); ok {
				addr <- a
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	var listening time.Time
	for time.Now().Before(deadline) {
		select {
		case a := <-addr:
			p.url = "http://" + a
			return p, nil
		case <-time.After(20 * time.Millisecond):
		}
		if logFile == "" {
			continue
		}
		data, _ := os.ReadFile(logFile)
		for line := range strings.SplitSeq(string(data), "\n") {
			var entry struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &entry) != nil {
				continue
			}
			switch entry.Msg {
			case "listening":
				p.url = "http://" + entry.Addr
			case "metrics listening":
				p.metricsURL = "http://" + entry.Addr + "/metrics"
			}
		}
		if p.url != "" && listening.IsZero() {
			listening = time.Now()
		}
		if p.url != "" && (!wantMetrics || p.metricsURL != "") {
			return p, nil
		}
		if p.url != "" && time.Since(listening) > 2*time.Second {
			fmt.Println("plantstore logged no \"metrics listening\" line: no batch sizes")
			return p, nil
		}
	}
	p.stop()
	return nil, fmt.Errorf("%s did not start listening within 30 s", strings.Join(cmd.Args, " "))
}

func startPlantstore(c config, dir, db string) (*process, error) {
	return startPlantstoreLog(c, dir, db, "serve.log", nil)
}

// startPlantstoreLog starts plantstore through prefix, with its log in
// dir/logName and its metrics on a port of its choosing.
func startPlantstoreLog(c config, dir, db, logName string, prefix []string, args ...string) (*process, error) {
	logFile := filepath.Join(dir, logName)
	log, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	args = append([]string{"serve", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--db", db, "--log-level", c.logLevel}, args...)
	cmd := command(prefix, c.bin, args...)
	cmd.Stderr = log
	return startServer(cmd, logFile, true)
}

// startBaseline starts the bare baseline through prefix; with a dir, the
// durable baseline, its creates made durable in a log there.
func startBaseline(prefix []string, dir string) (*process, target, error) {
	token := randomHex(16)
	self, err := os.Executable()
	if err != nil {
		return nil, target{}, err
	}
	args := []string{"-serve-baseline", token}
	name := "baseline"
	if dir != "" {
		args, name = append(args, dir), "durable baseline"
	}
	p, err := startServer(command(prefix, self, args...), "", false)
	if err != nil {
		return nil, target{}, err
	}
	t := target{name: name, url: p.url, token: token, pid: p.cmd.Process.Pid}
	if dir != "" {
		t.metrics = []string{p.url + "/metrics"}
	}
	return p, t, nil
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
// it, through prefix.
func startFresh(c config, dir, db string, prefix []string) (*process, target, error) {
	token, err := createToken(c, db)
	if err != nil {
		return nil, target{}, err
	}
	server, err := startPlantstoreLog(c, dir, db, "serve-"+filepath.Base(db)+".log", prefix)
	if err != nil {
		return nil, target{}, err
	}
	t := target{name: "plantstore", url: server.url, token: token, pid: server.cmd.Process.Pid, engine: "sqlite", instances: 1}
	if server.metricsURL != "" {
		t.metrics = []string{server.metricsURL}
	}
	return server, t, nil
}

// durableRole is the durable baseline's role in a shape (its cgroup's name
// under the quota).
const durableRole = "durable-baseline"

func runComparison(c config, dir string) error {
	all := scenarios(seeded, 0)
	for _, name := range c.scenarios {
		if _, ok := all[name]; !ok {
			return fmt.Errorf("unknown scenario %q", name)
		}
	}
	var results []result
	var ran []string
	for _, name := range c.shapes {
		var extra []string
		if c.durableBaseline {
			extra = append(extra, durableRole)
		}
		sh, skip, err := setupShape(name, extra...)
		if err != nil {
			return err
		}
		if skip != "" {
			fmt.Printf("\n## shape %s: skipped: %s\n", name, skip)
			continue
		}
		rs, err := runShape(c, dir, sh)
		sh.cleanup()
		results = append(results, rs...)
		if err != nil {
			return fmt.Errorf("shape %s: %w", name, err)
		}
		ran = append(ran, name)
	}
	if len(ran) > 1 {
		printSummary(results, ran)
	}
	if note := paceNote(results); note != "" {
		fmt.Printf("\n%s\n\n", note)
	}
	data, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(c.out, data, 0o644); err != nil {
		return err
	}
	fmt.Println("results written to", c.out)
	if c.chart != "" && len(c.sweep) > 0 && slices.Contains(ran, "unpinned") {
		if err := os.WriteFile(c.chart, drawChart(results, c.sweep), 0o644); err != nil {
			return err
		}
		fmt.Println("chart (from the unpinned shape's sweep) drawn in", c.chart)
	}
	return nil
}

// runShape starts the baseline and plantstore afresh as shape sh says,
// seeds the store and measures every scenario against both.
func runShape(c config, dir string, sh *shape) ([]result, error) {
	prefix := func(role string) []string {
		if sh.prefix == nil {
			return nil
		}
		return sh.prefix(role)
	}
	fmt.Printf("\n## shape %s: %s\n\n", sh.name, sh.setup)
	// plantstore is seeded unconfined (on one core, seeding alone would
	// take a while), then restarted as the shape says, on the same store.
	db := filepath.Join(dir, "bench-"+sh.name+".db")
	server, store, err := startFresh(c, dir, db, nil)
	if err != nil {
		return nil, err
	}
	defer func() { server.stop() }()
	stores := []target{store}
	if c.postgres != "" && sh.name != "unpinned" {
		fmt.Println("PostgreSQL is measured in the unpinned shape only; here SQLite alone.")
	}
	if c.postgres != "" && sh.name == "unpinned" {
		// Told apart from PostgreSQL's rows; the default run keeps its
		// labels.
		stores[0].name = "plantstore (sqlite)"
		for _, n := range c.instances {
			pg, stop, err := startPostgres(c, dir, n)
			// stop drops the database: it runs even when the start failed
			// half-way, or when the harness is interrupted.
			stop = once(stop)
			atExit(stop)
			defer stop()
			if err != nil {
				return nil, err
			}
			stores = append(stores, pg)
		}
	}
	if c.durableBaseline {
		logDir := filepath.Join(dir, "durable-"+sh.name)
		if err := os.Mkdir(logDir, 0o755); err != nil {
			return nil, err
		}
		durable, t, err := startBaseline(prefix(durableRole), logDir)
		if err != nil {
			return nil, err
		}
		defer durable.stop()
		stores = append(stores, t)
	}
	for _, t := range stores {
		if len(stores) > 1 {
			fmt.Printf("seeding %d plants in %s ...\n", seeded, t.name)
		} else {
			fmt.Printf("seeding %d plants ...\n", seeded)
		}
		if err := seed(t, seeded); err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	if sh.prefix != nil {
		server.stop()
		server, err = startPlantstoreLog(c, dir, db, "serve-"+sh.name+".log", prefix("plantstore"))
		if err != nil {
			return nil, err
		}
		store.url, store.pid, store.metrics = server.url, server.cmd.Process.Pid, nil
		if server.metricsURL != "" {
			store.metrics = []string{server.metricsURL}
		}
		stores[0] = store
	}
	baseline, bare, err := startBaseline(prefix("baseline"), "")
	if err != nil {
		return nil, err
	}
	defer baseline.stop()
	// Only now, with the servers started and seeded, is the generator
	// confined: the servers must not inherit its CPUs.
	if sh.generatorCPUs != nil {
		restore, err := confine(sh.generatorCPUs)
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	psProcs := "?"
	if len(store.metrics) > 0 {
		if n, ok := scrapeMetrics(store.metrics[0])["go_sched_gomaxprocs_threads"]; ok {
			psProcs = strconv.Itoa(int(n))
		}
	}
	fmt.Printf("GOMAXPROCS: baseline %d, plantstore %s; load generator: CPUs %s, GOMAXPROCS %d\n",
		baseline.gomaxprocs, psProcs, cpuList(currentCPUs()), runtime.GOMAXPROCS(0))

	var counter atomic.Int64
	counter.Store(1 << 40) // created ids start far above the seeded ones
	all := scenarios(seeded, 0)
	var results []result
	measure := func(t target, r result) result {
		r.PeakRSSMiB, r.PeakRSSEachMiB = t.peakRSS()
		r.Shape = sh.name
		results = append(results, r)
		return r
	}
	fmt.Printf("%d connections, %s per run after %s of warm-up; closed loop: each target's best of %d runs, the targets alternating; ratios are plantstore / baseline\n", c.connections, c.duration, c.warmup, c.rounds)
	if len(stores) > 1 {
		fmt.Printf("PostgreSQL: a fresh database per instance count, each instance's pool %s; with several instances,\n"+
			"the connections are spread round-robin over them (each sticks to one) and peak RSS is the maximum over the instances.\n"+
			"The open-loop rate is half the slowest target's closed-loop rate. Everything (load generator, baseline,\n"+
			"every plantstore instance, PostgreSQL) shares this machine's %d CPUs.\n",
			poolSize(c), runtime.NumCPU())
	}
	fmt.Println()
	printHeader()
	for _, name := range c.scenarios {
		s := all[name]
		// Each target's best of c.rounds closed-loop runs, the targets
		// taking turns, so that a moment's noise on this shared machine
		// does not decide a ratio; every round's req/s is kept, and the
		// errors of every round are counted.
		targets := append([]target{bare}, stores...)
		best := make([]result, len(targets))
		rounds := make([][]float64, len(targets))
		errs := make([]int, len(targets))
		for range c.rounds {
			for i, t := range targets {
				r := closedLoop(t, s, c.connections, c.warmup, c.duration, &counter)
				errs[i] += r.Errors
				if rounds[i] = append(rounds[i], r.RPS); len(rounds[i]) == 1 || r.RPS > best[i].RPS {
					best[i] = r
				}
			}
		}
		for i, t := range targets {
			best[i].RoundsRPS, best[i].Errors = rounds[i], errs[i]
			best[i] = measure(t, best[i])
		}
		b, ps := best[0], best[1:]
		printRows(b, ps...)
		rate := c.rate
		if rate == 0 {
			slowest := b.RPS
			for _, p := range ps {
				slowest = min(slowest, p.RPS)
			}
			rate = max(1, int(slowest/2))
		}
		var open []result
		for _, t := range targets {
			open = append(open, measure(t, openLoop(t, s, c.connections, rate, c.warmup, c.duration, &counter)))
		}
		printRows(open[0], open[1:]...)
	}
	if sh.name == "unpinned" {
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
	}
	fmt.Println()
	for _, t := range stores {
		peak, each := t.peakRSS()
		name := "plantstore"
		if len(stores) > 1 {
			name = t.name
		}
		fmt.Printf("%s peak RSS over the shape's run: %.1f MiB", name, peak)
		if len(each) > 0 {
			fmt.Printf(" (the maximum over its instances: %s MiB)", joinMiB(each))
		}
		fmt.Println()
	}
	if sh.report != nil {
		sh.report()
	}
	printTargets(sh.name, results)
	return results, nil
}

// outSet says whether -out was given.
func outSet() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "out" })
	return set
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

func joinMiB(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(s, ", ")
}
