package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The webhook deliveries' costs (-webhooks), in each shape of -shapes
// (the servers started as the shape says, the load generator and the
// receiver, in its process, confined as it says):
//
//   - Delivery rate to one subscriber: a backlog of -webhook-backlog
//     events is queued while the receiver (in this process, on loopback,
//     keep-alive) holds every request; then it lets them go, answering at
//     once or after -webhook-delay, and the rate is the distinct events
//     received per second from then until the backlog is drained or
//     -webhook-window has passed. The same for the binary of -before, the
//     baseline of the same run.
//   - Creates with one subscriber (answering at once) against creates
//     with none, closed-loop at -connections for -duration, alternating
//     hookRounds times. The ratio is the median of the rounds' ratios
//     (each round's two runs are next to each other in time, so a
//     neighbour's load that comes and goes moves both), with the ratio
//     of the medians beside it, and the same of the server's CPU time
//     per create. During each one-subscriber run the receiver counts
//     what it got (the deliveries that went out under the load), and
//     after it how long the backlog took to drain.

// webhooksResult is what -webhooks writes to -out.
type webhooksResult struct {
	Shape       string           `json:"shape"`
	Before      string           `json:"before,omitempty"`
	Concurrency int              `json:"webhook_concurrency"`
	Delivery    []deliveryRate   `json:"delivery"`
	Creates     []webhookCreates `json:"creates"`
	Command     string           `json:"command"`
}

type deliveryRate struct {
	Binary     string  `json:"binary"` // "current" or the -before revision
	DelayMs    float64 `json:"receiver_delay_ms"`
	Backlog    int     `json:"backlog"`
	Received   int     `json:"received"` // distinct events within the window
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"events_per_second"`
	Duplicates int     `json:"duplicates"`
}

// hookRounds is how many times creates with and without a subscriber
// are measured, alternating: the machine is shared, and a median of
// five is steadier than one of three.
const hookRounds = 5

type webhookCreates struct {
	Binary           string  `json:"binary"`
	NoSubscriberRPS  float64 `json:"no_subscriber_rps"`
	OneSubscriberRPS float64 `json:"one_subscriber_rps"`
	Ratio            float64 `json:"ratio"` // of the medians
	// The median of the rounds' ratios (one subscriber ÷ none, each
	// round's two runs next to each other), and its lowest and highest.
	RoundRatio    float64   `json:"round_ratio"`
	RoundRatios   []float64 `json:"round_ratios"`
	RoundCPURatio float64   `json:"round_cpu_ratio"` // median of the rounds' CPU per create, none ÷ one
	// Under the load: the deliveries the receiver got per second during
	// the one-subscriber runs (warm-up included), and then the seconds
	// until the backlog left behind was delivered (the median of the
	// rounds).
	DeliveredPerSecondUnderLoad float64 `json:"delivered_per_second_under_load"`
	CatchUpSeconds              float64 `json:"catch_up_seconds"`
	// The server's CPU time per create, the deliveries' included.
	NoSubscriberCPUUs  float64 `json:"no_subscriber_server_cpu_us_per_create"`
	OneSubscriberCPUUs float64 `json:"one_subscriber_server_cpu_us_per_create"`
	GeneratorBusyPct   float64 `json:"generator_busy_pct"` // the generator and the receiver share this process
	Delivered          int     `json:"delivered"`          // events the subscriber received during its runs
	// With the receiver holding every request: what the outbox costs a
	// create, without the deliveries' CPU.
	HeldRPS   float64 `json:"held_receiver_rps"`
	HeldRatio float64 `json:"held_receiver_ratio"`
	HeldCPUUs float64 `json:"held_receiver_server_cpu_us_per_create"`
}

// hookReceiver counts the distinct webhook-ids it receives; while held,
// requests wait.
type hookReceiver struct {
	url   string
	srv   *http.Server
	delay time.Duration

	mu      sync.Mutex
	hold    chan struct{}
	seen    map[string]bool
	dups    int
	last    time.Time
	arrived chan struct{}
}

func newHookReceiver() (*hookReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &hookReceiver{url: "http://" + ln.Addr().String() + "/hook", seen: map[string]bool{}, arrived: make(chan struct{}, 1)}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	atExit(func() { r.srv.Close() })
	return r, nil
}

func (r *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var buf [4096]byte
	for {
		if _, err := req.Body.Read(buf[:]); err != nil {
			break
		}
	}
	r.mu.Lock()
	hold, delay := r.hold, r.delay
	r.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	id := req.Header.Get("webhook-id")
	r.mu.Lock()
	if r.seen[id] {
		r.dups++
	}
	r.seen[id] = true
	r.last = time.Now()
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

// reset forgets what was received, and holds requests when hold.
func (r *hookReceiver) reset(delay time.Duration, hold bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen, r.dups, r.delay, r.hold = map[string]bool{}, 0, delay, nil
	if hold {
		r.hold = make(chan struct{})
	}
}

func (r *hookReceiver) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hold != nil {
		close(r.hold)
		r.hold = nil
	}
}

// awaitQuiet waits until nothing has arrived for quiet, or for limit, and
// returns when the last delivery arrived.
func (r *hookReceiver) awaitQuiet(quiet, limit time.Duration) time.Time {
	deadline := time.Now().Add(limit)
	for {
		r.mu.Lock()
		last := r.last
		r.mu.Unlock()
		if time.Since(last) >= quiet || !time.Now().Before(deadline) {
			return last
		}
		time.Sleep(quiet / 4)
	}
}

func (r *hookReceiver) count() (distinct, dups int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen), r.dups
}

// awaitDrained waits until the subscribers of the store at db have no
// pending delivery (webhook list), for limit at most.
func awaitDrained(bin, db string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		out, err := exec.Command(bin, "webhook", "list", "--json", "--db", db).Output()
		if err != nil {
			return fmt.Errorf("webhook list: %w", err)
		}
		var subs []struct {
			Pending int `json:"pending"`
		}
		if err := json.Unmarshal(out, &subs); err != nil {
			return fmt.Errorf("webhook list: %w", err)
		}
		pending := 0
		for _, s := range subs {
			pending += s.Pending
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d deliveries still pending after %s", pending, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hookBinary is a plantstore binary the webhook costs are measured on.
type hookBinary struct{ name, path string }

// hookRun is what one shape's measurement of the webhook costs needs.
type hookRun struct {
	backlog     int
	delay       time.Duration
	window      time.Duration
	concurrency int
	before      string
	bins        []hookBinary
	recv        *hookReceiver
	n           int // stores made so far
}

func runWebhookCosts(c config, dir, before string, backlog int, delay, window time.Duration, concurrency int) error {
	recv, err := newHookReceiver()
	if err != nil {
		return err
	}
	h := &hookRun{backlog: backlog, delay: delay, window: window, concurrency: concurrency, before: before, recv: recv,
		bins: []hookBinary{{"current", c.bin}}}
	if before != "" {
		path, err := buildRevision(dir, before)
		if err != nil {
			return err
		}
		h.bins = append(h.bins, hookBinary{before, path})
	}
	var results []webhooksResult
	for _, name := range c.shapes {
		sh, skip, err := setupShape(name)
		if err != nil {
			return err
		}
		if skip != "" {
			fmt.Printf("\n## shape %s: skipped: %s\n", name, skip)
			continue
		}
		fmt.Printf("\n# shape %s: %s\n", sh.name, sh.setup)
		r, err := h.inShape(c, dir, sh)
		sh.cleanup()
		if err != nil {
			return fmt.Errorf("shape %s: %w", name, err)
		}
		results = append(results, r)
	}
	data, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(c.out, data, 0o644); err != nil {
		return err
	}
	fmt.Println("\nresults written to", c.out)
	return nil
}

// inShape measures the delivery rates and the creates with and without a
// subscriber, the servers started as sh says and the load generator (and
// the receiver, in its process) confined as it says.
func (h *hookRun) inShape(c config, dir string, sh *shape) (webhooksResult, error) {
	backlog, delay, window, concurrency, before, bins, recv := h.backlog, h.delay, h.window, h.concurrency, h.before, h.bins, h.recv
	res := webhooksResult{Shape: sh.name, Before: before, Concurrency: concurrency, Command: "go run ./bench " + strings.Join(os.Args[1:], " ")}
	var prefix []string
	if sh.prefix != nil {
		prefix = sh.prefix("plantstore")
	}
	if sh.generatorCPUs != nil {
		restore, err := confine(sh.generatorCPUs)
		if err != nil {
			return res, err
		}
		defer restore()
	}
	type binary = hookBinary
	// start runs bin on a fresh store with a token and, when subscribe,
	// recv as its one subscriber.
	dbs := map[*process]string{}
	start := func(bin binary, subscribe bool, extra ...string) (*process, target, error) {
		h.n++
		n := h.n
		cc := c
		cc.bin = bin.path
		db := filepath.Join(dir, fmt.Sprintf("webhooks-%d.db", n))
		token, err := createToken(cc, db)
		if err != nil {
			return nil, target{}, err
		}
		if subscribe {
			if out, err := exec.Command(bin.path, "webhook", "add", recv.url, "--db", db).CombinedOutput(); err != nil {
				return nil, target{}, fmt.Errorf("webhook add: %v: %s", err, out)
			}
		}
		args := append([]string{"--allow-private-webhooks"}, extra...)
		if bin.name == "current" {
			args = append(args, "--webhook-concurrency", fmt.Sprint(concurrency))
		}
		p, err := startPlantstoreLog(cc, dir, db, fmt.Sprintf("serve-webhooks-%d.log", n), prefix, args...)
		if err != nil {
			return nil, target{}, err
		}
		t := target{name: bin.name, url: p.url, token: token, pid: p.cmd.Process.Pid, engine: "sqlite", instances: 1}
		if p.metricsURL != "" {
			t.metrics = []string{p.metricsURL}
		}
		dbs[p] = db
		return p, t, nil
	}

	delays := []time.Duration{0, delay}
	if backlog == 0 {
		delays = nil // creates only
	} else {
		fmt.Printf("\n## %s: webhook delivery rate to one subscriber: a backlog of %d events, the receiver on loopback with keep-alive\n\n", sh.name, backlog)
	}
	for _, d := range delays {
		for _, bin := range bins {
			p, t, err := start(bin, true)
			if err != nil {
				return res, err
			}
			recv.reset(d, true)
			if err := seed(t, int64(backlog)); err != nil {
				p.stop()
				return res, err
			}
			begin := time.Now()
			recv.release()
			deadline := begin.Add(window)
			for {
				got, _ := recv.count()
				if got >= backlog || time.Now().After(deadline) {
					break
				}
				select {
				case <-recv.arrived:
				case <-time.After(50 * time.Millisecond):
				}
			}
			got, dups := recv.count()
			elapsed := time.Since(begin)
			if got >= backlog {
				recv.mu.Lock()
				elapsed = recv.last.Sub(begin)
				recv.mu.Unlock()
			}
			p.stop()
			r := deliveryRate{Binary: bin.name, DelayMs: ms(d), Backlog: backlog, Received: got, Seconds: elapsed.Seconds(),
				PerSecond: float64(got) / elapsed.Seconds(), Duplicates: dups}
			res.Delivery = append(res.Delivery, r)
			fmt.Printf("%-10s receiver answering after %3.0f ms: %6d events in %5.1f s: %7.0f events/s (%d received twice)\n",
				bin.name, r.DelayMs, got, r.Seconds, r.PerSecond, dups)
		}
	}
	if len(bins) > 1 {
		fmt.Println()
		for i := 0; i+1 < len(res.Delivery); i += 2 {
			cur, old := res.Delivery[i], res.Delivery[i+1]
			fmt.Printf("receiver after %.0f ms: current %.0f events/s against %.0f at %s: %.1fx\n", cur.DelayMs, cur.PerSecond, old.PerSecond, before, cur.PerSecond/old.PerSecond)
		}
	}

	fmt.Printf("\n## %s: creates with one subscriber (answering at once) against none: closed loop, %d connections, %v each, median of %d\n\n", sh.name, c.connections, c.duration, hookRounds)
	for _, bin := range bins {
		none, noneT, err := start(bin, false)
		if err != nil {
			return res, err
		}
		one, oneT, err := start(bin, true)
		if err != nil {
			none.stop()
			return res, err
		}
		recv.reset(0, false)
		var counter atomic.Int64
		create := scenarios(0, 0)["create"]
		var noS, oneS []result
		var ratios, cpuRatios, underLoad, catchUp []float64
		for round := range hookRounds {
			noS = append(noS, closedLoop(noneT, create, c.connections, c.warmup, c.duration, &counter))
			before, _ := recv.count()
			began := time.Now()
			oneS = append(oneS, closedLoop(oneT, create, c.connections, c.warmup, c.duration, &counter))
			ended := time.Now()
			after, _ := recv.count()
			// The deliveries left behind go out before the next round,
			// not during it: the two servers share the shape's CPU. (The
			// receiver's silence does not say so: deferred, deliveries
			// come a second apart under the load.)
			if err := awaitDrained(bin.path, dbs[one], 60*time.Second); err != nil {
				return res, err
			}
			last := recv.awaitQuiet(200*time.Millisecond, 5*time.Second)
			no, one := noS[round], oneS[round]
			ratios = append(ratios, one.RPS/no.RPS)
			cpuRatios = append(cpuRatios, no.ServerCPUUs/one.ServerCPUUs)
			underLoad = append(underLoad, float64(after-before)/ended.Sub(began).Seconds())
			catchUp = append(catchUp, max(0, last.Sub(ended).Seconds()))
			fmt.Printf("%s, round %d: %.0f creates/s with no subscriber, %.0f with one: %.2fx (server CPU %.0f µs a create against %.0f); %.0f deliveries/s under the load, the rest %.1f s after it\n",
				bin.name, round+1, no.RPS, one.RPS, ratios[round], one.ServerCPUUs, no.ServerCPUUs, underLoad[round], catchUp[round])
		}
		delivered, _ := recv.count()
		// The outbox alone: the receiver holds every request, so the
		// deliveries cost no CPU meanwhile (those in flight wait; the rest
		// queue).
		var heldS []result
		recv.reset(0, true)
		for round := range eventRounds {
			heldS = append(heldS, closedLoop(oneT, create, c.connections, c.warmup, c.duration, &counter))
			fmt.Printf("%s, round %d: %.0f creates/s with one subscriber whose receiver holds every request\n", bin.name, round+1, heldS[round].RPS)
		}
		recv.release()
		none.stop()
		one.stop()
		median := func(rs []result) result {
			slices.SortFunc(rs, func(a, b result) int { return cmpFloat(a.RPS, b.RPS) })
			return rs[len(rs)/2]
		}
		mn, mo, mh := median(noS), median(oneS), median(heldS)
		wc := webhookCreates{Binary: bin.name, NoSubscriberRPS: mn.RPS, OneSubscriberRPS: mo.RPS, Ratio: mo.RPS / mn.RPS,
			NoSubscriberCPUUs: mn.ServerCPUUs, OneSubscriberCPUUs: mo.ServerCPUUs, GeneratorBusyPct: mo.GeneratorBusyPct,
			HeldRPS: mh.RPS, HeldRatio: mh.RPS / mn.RPS, HeldCPUUs: mh.ServerCPUUs}
		wc.Delivered = delivered
		wc.RoundRatio, wc.RoundRatios, wc.RoundCPURatio = medianOf(ratios), ratios, medianOf(cpuRatios)
		wc.DeliveredPerSecondUnderLoad, wc.CatchUpSeconds = medianOf(underLoad), medianOf(catchUp)
		res.Creates = append(res.Creates, wc)
		fmt.Printf("%s: creates with one subscriber ÷ none, the median of the rounds: %.2fx (from %.2f to %.2f); of the medians %.0f/s ÷ %.0f: %.2fx; server CPU per create, none ÷ one: %.2fx (medians %.0f µs against %.0f); under the load %.0f deliveries/s, the backlog delivered %.1f s after it; the subscriber received %d events in all\n",
			bin.name, wc.RoundRatio, slices.Min(ratios), slices.Max(ratios), wc.OneSubscriberRPS, wc.NoSubscriberRPS, wc.Ratio,
			wc.RoundCPURatio, wc.OneSubscriberCPUUs, wc.NoSubscriberCPUUs, wc.DeliveredPerSecondUnderLoad, wc.CatchUpSeconds, wc.Delivered)
		fmt.Printf("%s: the outbox alone (receiver holding): %.0f creates/s: %.2fx; server CPU %.0f µs per create\n\n", bin.name, wc.HeldRPS, wc.HeldRatio, wc.HeldCPUUs)
	}

	if sh.report != nil {
		sh.report()
	}
	return res, nil
}

// medianOf returns the median of xs (the upper one of an even count).
func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
