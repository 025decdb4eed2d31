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
	name string
	next func(n int64, r *rand.Rand) (method, path string, body []byte)
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
}

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
	client := &http.Client{Transport: newTransport(conns), Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var measuring atomic.Bool
	stopAt := time.Now().Add(warmup + d)
	lat := make([][]time.Duration, conns)
	errs := make([]int, conns)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Go(func() {
			t := t.forWorker(w)
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(stopAt) {
				method, path, body := s.next(counter.Add(1), r)
				begin := time.Now()
				status, err := send(context.Background(), client, t, method, path, body)
				took := time.Since(begin)
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
	measuring.Store(true)
	begin := time.Now()
	wg.Wait()
	return summarize(t, s, "closed", conns, 0, lat, errs, time.Since(begin))
}

// openLoop sends at a fixed rate whatever the answers do, from up to conns
// connections; latency counts from when a request was due, so a slow
// server cannot hide queueing (no coordinated omission).
func openLoop(t target, s scenario, conns, rate int, warmup, d time.Duration, counter *atomic.Int64) result {
	client := &http.Client{Transport: newTransport(conns), Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	interval := time.Second / time.Duration(rate)
	due := make(chan time.Time, conns)
	lat := make([][]time.Duration, conns)
	errs := make([]int, conns)
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(d)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Go(func() {
			t := t.forWorker(w)
			r := rand.New(rand.NewPCG(uint64(w), 11))
			for at := range due {
				method, path, body := s.next(counter.Add(1), r)
				status, err := send(context.Background(), client, t, method, path, body)
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
	return summarize(t, s, "open", conns, rate, lat, errs, time.Since(measureFrom))
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

func scenarios(seeded int64, idBase int64) map[string]scenario {
	create := func(n int64) []byte {
		return fmt.Appendf(nil, `{"id":%d,"name":"plant number %d","tag":"bench"}`, idBase+n, n)
	}
	get := func(r *rand.Rand) string { return "/plants/" + strconv.FormatInt(1+r.Int64N(seeded), 10) }
	return map[string]scenario{
		"create": {"create", func(n int64, _ *rand.Rand) (string, string, []byte) { return "POST", "/plants", create(n) }},
		"get":    {"get", func(_ int64, r *rand.Rand) (string, string, []byte) { return "GET", get(r), nil }},
		"list":   {"list", func(int64, *rand.Rand) (string, string, []byte) { return "GET", "/plants?limit=100", nil }},
		"mixed": {"mixed", func(n int64, r *rand.Rand) (string, string, []byte) {
			if r.IntN(10) < 2 {
				return "POST", "/plants", create(n)
			}
			return "GET", get(r), nil
		}},
	}
}
