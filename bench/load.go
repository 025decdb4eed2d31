package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// A scenario makes the next request. n counts requests across workers.
type scenario struct {
	name    string
	creates bool // whether it sends POSTs, whose group commits are worth reporting
	next    func(n int64, r *rand.Rand) (method, path string, body []byte)
	// header is sent with every request, as "Name: value\r\n" lines.
	header string
	// answered, when set, is told of each request n answered 2xx, and
	// when (the -events fan-out measures from it).
	answered func(n int64, at time.Time)
}

// withHeader gives c the scenario's extra header lines.
func (s scenario) withHeader(c requester) requester {
	if lc, ok := c.(*leanConn); ok && s.header != "" {
		lc.header = append(lc.header, s.header...)
	}
	return c
}

// result is what one run of a scenario measured.
type result struct {
	Target      string  `json:"target"`
	Scenario    string  `json:"scenario"`
	Mode        string  `json:"mode"` // closed or open (fixed rate)
	Connections int     `json:"connections"`
	Rate        int     `json:"rate,omitempty"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	RPS         float64 `json:"rps"`
	P50         float64 `json:"p50_ms"`
	P99         float64 `json:"p99_ms"`
	P999        float64 `json:"p999_ms"`
	PeakRSSMiB  float64 `json:"peak_rss_mib,omitempty"` // with several instances, the maximum over them
	// PeakRSSEachMiB is each instance's peak RSS, when there are several.
	PeakRSSEachMiB []float64 `json:"peak_rss_each_mib,omitempty"`
	Sweep          bool      `json:"sweep,omitempty"`     // a point of the chart
	Engine         string    `json:"engine,omitempty"`    // plantstore's storage: sqlite or postgres
	Instances      int       `json:"instances,omitempty"` // plantstore serve processes behind the target
	// Shape is how the servers and the load generator shared the CPUs:
	// pinned, quota or unpinned (see shapes.go).
	Shape string `json:"shape,omitempty"`
	// ServerCPUUs is the server's CPU time (user+system, all its
	// instances) over the measured interval, per request answered.
	ServerCPUUs float64 `json:"server_cpu_us_per_request,omitempty"`
	// GeneratorBusyPct is the load generator's CPU time over the measured
	// interval, as a share of the CPUs it was allowed (GeneratorCPUs).
	GeneratorBusyPct float64 `json:"generator_busy_pct"`
	GeneratorCPUs    int     `json:"generator_cpus"`
	// MeanBatch is the mean size of the group commits over the measured
	// interval (from plantstore's metrics), for runs that create.
	MeanBatch float64 `json:"mean_batch_size,omitempty"`
	// RoundsRPS is the req/s of each closed-loop round, in order, of
	// which this result is the best; then Errors counts every round's.
	RoundsRPS []float64 `json:"rounds_rps,omitempty"`
}

// suspectBusy is the generator's busy share above which its run may have
// measured the generator rather than the server.
const suspectBusy = 90

func (r result) suspect() bool { return r.GeneratorBusyPct > suspectBusy }

// A target is a server under load: the baseline, or plantstore on one
// engine behind one or more "plantstore serve" processes.
type target struct {
	name  string
	url   string
	token string
	pid   int
	// engine and instances describe plantstore's targets (empty and 0 for
	// the baseline).
	engine    string
	instances int
	// urls and pids are every instance's, when there are several; url and
	// pid are then the first's. Worker w of a run sends all its requests
	// to urls[w%len(urls)], so each connection sticks to one instance and
	// the connections are spread round-robin over them.
	urls []string
	pids []int
	// metrics are the URLs of plantstore's /metrics, one per instance
	// (none for the baseline).
	metrics []string
}

// forWorker is t as worker w sees it: bound to one instance.
func (t target) forWorker(w int) target {
	if len(t.urls) > 0 {
		t.url = t.urls[w%len(t.urls)]
	}
	return t
}

// peakRSS is the target's peak RSS in MiB, the maximum over its instances,
// and each instance's when there are several.
func (t target) peakRSS() (float64, []float64) {
	if len(t.pids) <= 1 {
		return peakRSS(t.pid), nil
	}
	var peak float64
	each := make([]float64, len(t.pids))
	for i, pid := range t.pids {
		each[i] = peakRSS(pid)
		peak = max(peak, each[i])
	}
	return peak, each
}

func newTransport(conns int) *http.Transport {
	return &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}
}

func send(ctx context.Context, client *http.Client, t target, method, path string, body []byte) (int, error) {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.url+path, reader)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+t.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// closedLoop runs conns workers, each sending its next request when the
// previous one is answered, for d after a warm-up.
func closedLoop(t target, s scenario, conns int, warmup, d time.Duration, counter *atomic.Int64) result {
	return closedLoopWith(newLeanConn, t, s, conns, warmup, d, counter)
}

// closedLoopWith is closedLoop with the given client.
func closedLoopWith(dial func(target, time.Time) requester, t target, s scenario, conns int, warmup, d time.Duration, counter *atomic.Int64) result {
	var measuring atomic.Bool
	stopAt := time.Now().Add(warmup + d)
	lat := make([][]time.Duration, conns)
	errs := make([]int, conns)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Go(func() {
			t := t.forWorker(w)
			c := s.withHeader(dial(t, stopAt.Add(30*time.Second)))
			defer c.close()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(stopAt) {
				n := counter.Add(1)
				method, path, body := s.next(n, r)
				begin := time.Now()
				status, err := c.do(method, path, body)
				took := time.Since(begin)
				if s.answered != nil && err == nil && status < 300 {
					s.answered(n, begin.Add(took))
				}
				if !measuring.Load() {
					continue
				}
				if err != nil || status >= 300 {
					errs[w]++
				}
				lat[w] = append(lat[w], took)
			}
		})
	}
	time.Sleep(warmup)
	batchesBefore := scrapeBatches(t, s)
	before := takeUsage(t)
	measuring.Store(true)
	wg.Wait()
	after := takeUsage(t)
	res := summarize(t, s, "closed", conns, 0, lat, errs, after.at.Sub(before.at))
	res.addUsage(before, after)
	res.addBatches(<-batchesBefore, <-scrapeBatches(t, s))
	return res
}

// openLoop sends at a fixed rate whatever the answers do, from up to conns
// connections; latency counts from when a request was due, so a slow
// server cannot hide queueing (no coordinated omission).
func openLoop(t target, s scenario, conns, rate int, warmup, d time.Duration, counter *atomic.Int64) result {
	interval := time.Second / time.Duration(rate)
	due := make(chan time.Time, conns)
	lat := make([][]time.Duration, conns)
	errs := make([]int, conns)
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(d)
	// The usage is read aside, so that reading it does not delay the
	// requests that are due.
	usageFrom := make(chan usage, 1)
	batchesFrom := make(chan (<-chan batches), 1)
	time.AfterFunc(warmup, func() {
		usageFrom <- takeUsage(t)
		batchesFrom <- scrapeBatches(t, s)
	})
	var wg sync.WaitGroup
	for w := range conns {
		wg.Go(func() {
			t := t.forWorker(w)
			c := s.withHeader(newLeanConn(t, end.Add(30*time.Second)))
			defer c.close()
			r := rand.New(rand.NewPCG(uint64(w), 11))
			for at := range due {
				method, path, body := s.next(counter.Add(1), r)
				status, err := c.do(method, path, body)
				if at.Before(measureFrom) {
					continue
				}
				if err != nil || status >= 300 {
					errs[w]++
				}
				lat[w] = append(lat[w], time.Since(at))
			}
		})
	}
	for at := start; at.Before(end); at = at.Add(interval) {
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		due <- at // blocks when every connection is busy: the delay is then counted
	}
	close(due)
	wg.Wait()
	after := takeUsage(t)
	before := <-usageFrom
	res := summarize(t, s, "open", conns, rate, lat, errs, after.at.Sub(before.at))
	res.addUsage(before, after)
	from := <-batchesFrom
	res.addBatches(<-from, <-scrapeBatches(t, s))
	return res
}

func summarize(t target, s scenario, mode string, conns, rate int, lat [][]time.Duration, errs []int, elapsed time.Duration) result {
	all := slices.Concat(lat...)
	slices.Sort(all)
	res := result{Target: t.name, Scenario: s.name, Mode: mode, Connections: conns, Rate: rate, Requests: len(all),
		Engine: t.engine, Instances: t.instances}
	for _, e := range errs {
		res.Errors += e
	}
	res.RPS = float64(len(all)) / elapsed.Seconds()
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		i := min(len(all)-1, int(p*float64(len(all))))
		return float64(all[i].Microseconds()) / 1000
	}
	res.P50, res.P99, res.P999 = pct(0.50), pct(0.99), pct(0.999)
	return res
}

// scenarios are the requests of each scenario on a store seeded with plants
// 1..seeded; created ids are idBase plus a counter.
func scenarios(seeded int64, idBase int64) map[string]scenario {
	create := func(n int64) []byte {
		return fmt.Appendf(nil, `{"id":%d,"name":"plant number %d","tag":"bench"}`, idBase+n, n)
	}
	get := func(r *rand.Rand) string { return "/plants/" + strconv.FormatInt(1+r.Int64N(seeded), 10) }
	// A page from a random position among the seeded plants, as paging
	// clients ask; the baseline encodes its fixed page whatever the query.
	list := func(r *rand.Rand) string {
		return "/plants?limit=100&after=" + strconv.FormatInt(r.Int64N(max(1, seeded-100+1)), 10)
	}
	return map[string]scenario{
		"create": {name: "create", creates: true, next: func(n int64, _ *rand.Rand) (string, string, []byte) { return "POST", "/plants", create(n) }},
		"get":    {name: "get", next: func(_ int64, r *rand.Rand) (string, string, []byte) { return "GET", get(r), nil }},
		"list":   {name: "list", next: func(_ int64, r *rand.Rand) (string, string, []byte) { return "GET", list(r), nil }},
		// The same pages, asked gzipped, as browsers and most HTTP
		// libraries ask: what compression costs (not in the default run;
		// the baseline does not compress).
		"list-gzip": {name: "list-gzip", next: func(_ int64, r *rand.Rand) (string, string, []byte) { return "GET", list(r), nil },
			header: "Accept-Encoding: gzip\r\n"},
		"mixed": {name: "mixed", creates: true, next: func(n int64, r *rand.Rand) (string, string, []byte) {
			if r.IntN(10) < 2 {
				return "POST", "/plants", create(n)
			}
			return "GET", get(r), nil
		}},
	}
}
