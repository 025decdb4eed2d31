package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The change feed's costs (-events): what recording an event costs a
// create, against a binary from before the feed (-before REV), and what
// open streams cost, with every stream checked to receive every event.
//
// Each shape in -shapes runs on its own: the servers started through the
// shape's prefix, the generator confined as the shape says. Creates run
// closed-loop at -connections for -duration, the two binaries alternating
// three times so that the machine's drift falls on both alike; the figure
// is the median of the three.

// eventRounds is how many times each binary or setting is measured, in
// turn.
const eventRounds = 3

// eventsResult is one shape's figures, as written to -out.
type eventsResult struct {
	Shape string `json:"shape"`
	// BeforeRPS and AfterRPS are the median creates per second of the
	// binary from before the feed and of this one; RecordingRatio is
	// AfterRPS / BeforeRPS.
	Before         string  `json:"before,omitempty"`
	BeforeRPS      float64 `json:"before_rps,omitempty"`
	AfterRPS       float64 `json:"after_rps,omitempty"`
	RecordingRatio float64 `json:"recording_ratio,omitempty"`
	BeforeCPUUs    float64 `json:"before_server_cpu_us_per_create,omitempty"`
	AfterCPUUs     float64 `json:"after_server_cpu_us_per_create,omitempty"`
	// Streams open during the fan-out runs; NoStreamsRPS and StreamsRPS
	// the median creates per second without and with them.
	Streams      int     `json:"streams"`
	NoStreamsRPS float64 `json:"no_streams_rps"`
	StreamsRPS   float64 `json:"streams_rps"`
	FanOutRatio  float64 `json:"fan_out_ratio"`
	// Delivered is the events the streams received over all runs, Missing
	// those a stream should have received and did not, Duplicates those
	// received twice. LagP50/P99 run from a create's answer to its
	// event's arrival on a stream.
	Delivered  int64   `json:"delivered"`
	Missing    int64   `json:"missing"`
	Duplicates int64   `json:"duplicates"`
	LagP50Ms   float64 `json:"lag_p50_ms"`
	LagP99Ms   float64 `json:"lag_p99_ms"`
	CPUUsNo    float64 `json:"server_cpu_us_per_create_no_streams"`
	CPUUsWith  float64 `json:"server_cpu_us_per_create_with_streams"`
}

func runEventCosts(c config, dir, before string, streams int) error {
	var beforeBin string
	if before != "" {
		var err error
		if beforeBin, err = buildRevision(dir, before); err != nil {
			return err
		}
	}
	var results []eventsResult
	for _, name := range c.shapes {
		sh, skip, err := setupShape(name)
		if err != nil {
			return err
		}
		if skip != "" {
			fmt.Printf("\n## shape %s: skipped: %s\n", name, skip)
			continue
		}
		fmt.Printf("\n## shape %s: %s\n\n", sh.name, sh.setup)
		r, err := eventCostsInShape(c, dir, sh, before, beforeBin, streams)
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

// buildRevision builds ./cmd/plantstore as it was at rev.
func buildRevision(dir, rev string) (string, error) {
	src := filepath.Join(dir, "src-"+rev)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	fmt.Printf("building plantstore at %s ...\n", rev)
	archive := exec.Command("sh", "-c", "git archive "+strconv.Quote(rev)+" | tar -x -C "+strconv.Quote(src))
	archive.Stderr = os.Stderr
	if err := archive.Run(); err != nil {
		return "", fmt.Errorf("git archive %s: %w", rev, err)
	}
	bin := filepath.Join(dir, "plantstore-"+rev)
	build := exec.Command("go", "build", "-o", bin, "./cmd/plantstore")
	build.Dir = src
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w", rev, err)
	}
	return bin, nil
}

func eventCostsInShape(c config, dir string, sh *shape, before, beforeBin string, streams int) (eventsResult, error) {
	res := eventsResult{Shape: sh.name, Streams: streams, Before: before}
	var prefix []string
	if sh.prefix != nil {
		prefix = sh.prefix("plantstore")
	}
	start := func(bin, name string, extra ...string) (*process, target, error) {
		cc := c
		cc.bin = bin
		db := filepath.Join(dir, fmt.Sprintf("events-%s-%s.db", sh.name, name))
		token, err := createToken(cc, db)
		if err != nil {
			return nil, target{}, err
		}
		p, err := startPlantstoreLog(cc, dir, db, "serve-events-"+sh.name+"-"+name+".log", prefix, extra...)
		if err != nil {
			return nil, target{}, err
		}
		t := target{name: name, url: p.url, token: token, pid: p.cmd.Process.Pid, engine: "sqlite", instances: 1}
		if p.metricsURL != "" {
			t.metrics = []string{p.metricsURL}
		}
		return p, t, nil
	}
	after, afterT, err := start(c.bin, "current", "--max-streams-per-token", strconv.Itoa(streams), "--max-streams", strconv.Itoa(streams))
	if err != nil {
		return res, err
	}
	defer after.stop()
	var old *process
	var oldT target
	if beforeBin != "" {
		if old, oldT, err = start(beforeBin, before); err != nil {
			return res, err
		}
		defer old.stop()
	}
	if sh.generatorCPUs != nil {
		restore, err := confine(sh.generatorCPUs)
		if err != nil {
			return res, err
		}
		defer restore()
	}
	var counter atomic.Int64
	counter.Store(1 << 40)
	create := scenarios(0, 0)["create"]
	run := func(t target) result {
		return closedLoop(t, create, c.connections, c.warmup, c.duration, &counter)
	}
	median := func(rs []result) (rps, cpu float64) {
		slices.SortFunc(rs, func(a, b result) int { return cmpFloat(a.RPS, b.RPS) })
		m := rs[len(rs)/2]
		return m.RPS, m.ServerCPUUs
	}

	if old != nil {
		var olds, news []result
		for round := range eventRounds {
			olds = append(olds, run(oldT))
			news = append(news, run(afterT))
			fmt.Printf("recording, round %d: %s %.0f creates/s, current %.0f\n", round+1, before, olds[round].RPS, news[round].RPS)
		}
		res.BeforeRPS, res.BeforeCPUUs = median(olds)
		res.AfterRPS, res.AfterCPUUs = median(news)
		res.RecordingRatio = res.AfterRPS / res.BeforeRPS
		fmt.Printf("recording events: %.0f creates/s against %.0f before the feed: %.2fx; server CPU %.0f µs per create against %.0f\n\n",
			res.AfterRPS, res.BeforeRPS, res.RecordingRatio, res.AfterCPUUs, res.BeforeCPUUs)
	}

	// Fan-out: the same creates with no stream open, then with streams
	// open, in turn; every stream must receive every event.
	acks := &ackTimes{at: map[int64]time.Time{}}
	acked := create
	acked.answered = acks.record // the scenario's ids are its n
	var noS, withS []result
	var lags []time.Duration
	for round := range eventRounds {
		noS = append(noS, run(afterT))
		followers, err := openStreams(afterT, streams)
		if err != nil {
			return res, err
		}
		first := counter.Load() + 1
		r := closedLoop(afterT, acked, c.connections, c.warmup, c.duration, &counter)
		last := counter.Load()
		withS = append(withS, r)
		got := followers.finish(first, last, acks)
		res.Delivered += got.delivered
		res.Missing += got.missing
		res.Duplicates += got.duplicates
		lags = append(lags, got.lags...)
		fmt.Printf("fan-out, round %d: %.0f creates/s with no stream, %.0f with %d streams; %d events received, %d missing, %d twice\n",
			round+1, noS[round].RPS, r.RPS, streams, got.delivered, got.missing, got.duplicates)
	}
	res.NoStreamsRPS, res.CPUUsNo = median(noS)
	res.StreamsRPS, res.CPUUsWith = median(withS)
	res.FanOutRatio = res.StreamsRPS / res.NoStreamsRPS
	slices.Sort(lags)
	if len(lags) > 0 {
		res.LagP50Ms = ms(lags[len(lags)/2])
		res.LagP99Ms = ms(lags[len(lags)*99/100])
	}
	fmt.Printf("fan-out to %d streams: %.0f creates/s against %.0f with none: %.2fx; server CPU %.0f µs per create against %.0f;\n"+
		"  each event reached every stream %.1f ms after its create was answered at the median, %.1f ms at p99; %d missing, %d twice\n",
		streams, res.StreamsRPS, res.NoStreamsRPS, res.FanOutRatio, res.CPUUsWith, res.CPUUsNo, res.LagP50Ms, res.LagP99Ms, res.Missing, res.Duplicates)
	return res, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ackTimes records when each create was answered, by plant id.
type ackTimes struct {
	mu sync.Mutex
	at map[int64]time.Time
}

func (a *ackTimes) record(id int64, at time.Time) {
	a.mu.Lock()
	a.at[id] = at
	a.mu.Unlock()
}

// followers are open streams, each recording the plant ids of the
// created events it receives and when.
type followers struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	streams []*follower
}

type follower struct {
	mu       sync.Mutex
	arrivals map[int64][]time.Time // plant id -> when its created event arrived
}

// openStreams opens n streams from now and waits until each has said
// where it starts.
func openStreams(t target, n int) (*followers, error) {
	ctx, cancel := context.WithCancel(context.Background())
	fs := &followers{cancel: cancel}
	ready := make(chan error, n)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, DisableCompression: true,
		DialContext: (&net.Dialer{}).DialContext}}
	for range n {
		f := &follower{arrivals: map[int64][]time.Time{}}
		fs.streams = append(fs.streams, f)
		fs.wg.Go(func() { f.follow(ctx, client, t, ready) })
	}
	for range n {
		if err := <-ready; err != nil {
			fs.cancel()
			fs.wg.Wait()
			return nil, err
		}
	}
	return fs, nil
}

var plantIDField = []byte(`"plant":{"id":`)

func (f *follower) follow(ctx context.Context, client *http.Client, t target, ready chan<- error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", t.url+"/events?type=plant.created", nil)
	req.Header.Set("Authorization", "Bearer "+t.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("GET /events as a stream: %s", resp.Status)
		resp.Body.Close()
	}
	if err != nil {
		ready <- err
		return
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	signalled := false
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if !signalled {
				ready <- fmt.Errorf("the stream ended before it started: %w", err)
			}
			return
		}
		if !signalled && bytes.HasPrefix(line, []byte(": events after ")) {
			signalled = true
			ready <- nil
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		now := time.Now()
		i := bytes.Index(data, plantIDField)
		if i < 0 {
			continue
		}
		rest := data[i+len(plantIDField):]
		end := bytes.IndexAny(rest, ",}")
		id, err := strconv.ParseInt(string(rest[:end]), 10, 64)
		if err != nil {
			continue
		}
		f.mu.Lock()
		f.arrivals[id] = append(f.arrivals[id], now)
		f.mu.Unlock()
	}
}

// delivery is what the streams received of the creates first..last.
type delivery struct {
	delivered, missing, duplicates int64
	lags                           []time.Duration
}

// finish waits (up to 10 s) for every stream to receive the events of
// the plants first..last whose creates were answered 200, closes the
// streams and counts. The lag of an event on a stream runs from its
// create's answer to its arrival there; an event may arrive before the
// answer does (0), as it is sent at commit.
func (fs *followers) finish(first, last int64, acks *ackTimes) delivery {
	acks.mu.Lock()
	want := map[int64]time.Time{}
	for id, at := range acks.at {
		if id >= first && id <= last {
			want[id] = at
		}
	}
	acks.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		complete := true
		for _, f := range fs.streams {
			f.mu.Lock()
			n := 0
			for id := range want {
				if len(f.arrivals[id]) > 0 {
					n++
				}
			}
			f.mu.Unlock()
			if n < len(want) {
				complete = false
				break
			}
		}
		if complete {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	fs.cancel()
	fs.wg.Wait()
	var d delivery
	for _, f := range fs.streams {
		for id, answered := range want {
			got := f.arrivals[id]
			switch {
			case len(got) == 0:
				d.missing++
			default:
				d.delivered++
				d.duplicates += int64(len(got) - 1)
				d.lags = append(d.lags, max(0, got[0].Sub(answered)))
			}
		}
	}
	return d
}
