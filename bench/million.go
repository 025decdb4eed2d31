package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"
)

// runMillion fills a store with 1,000,000 plants through the API, then
// restarts plantstore on it and measures how soon it is ready and how
// much memory it holds under reads.
func runMillion(c config, dir string) error {
	const n = 1_000_000
	db := filepath.Join(dir, "million.db")
	fmt.Println("-million runs in the unpinned shape only: servers and load generator share every CPU.")
	server, t, err := startFresh(c, dir, db, nil)
	if err != nil {
		return err
	}
	begin := time.Now()
	fmt.Printf("creating %d plants through the API ...\n", n)
	if err := seed(t, n); err != nil {
		server.stop()
		return err
	}
	fmt.Printf("created in %s (%.0f creates/s); peak RSS while creating: %.1f MiB\n",
		time.Since(begin).Round(time.Second), n/time.Since(begin).Seconds(), peakRSS(t.pid))
	server.stop()

	started := time.Now()
	server, err = startPlantstore(c, dir, db)
	if err != nil {
		return err
	}
	defer server.stop()
	for {
		resp, err := http.Get(server.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(started) > 30*time.Second {
			return fmt.Errorf("not ready after 30 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	fmt.Printf("restarted on %d plants: ready (GET /readyz 200) %s after the process started\n", n, time.Since(started).Round(time.Millisecond))
	t.url, t.pid = server.url, server.cmd.Process.Pid
	t.metrics = nil
	if server.metricsURL != "" {
		t.metrics = []string{server.metricsURL}
	}
	var counter atomic.Int64
	counter.Store(1 << 40)
	all := scenarios(n, 0)
	for _, name := range []string{"get", "list", "mixed"} {
		r := closedLoop(t, all[name], c.connections, c.warmup, c.duration, &counter)
		fmt.Printf("%s on %d plants: %.0f req/s, p99 %.2f ms, %d errors; server CPU %.1f µs/request; load generator %.0f%% busy; peak RSS so far %.1f MiB\n",
			name, n, r.RPS, r.P99, r.Errors, r.ServerCPUUs, r.GeneratorBusyPct, peakRSS(t.pid))
	}
	return nil
}
