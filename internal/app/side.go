package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/postgres"
)

// startSides starts the metrics and profiler listeners that are asked for,
// and returns a function that closes them.
func (a *App) startSides() (closeAll func(), err error) {
	var started []*http.Server
	closeAll = func() {
		for _, s := range started {
			s.Close()
		}
	}
	if a.metrics != nil {
		side, _, err := a.startSide(a.cfg.MetricsAddr, a.cfg.MetricsListener, "metrics", &a.metricsAddr, func(mux *http.ServeMux) {
			mux.Handle("GET /metrics", a.metrics.Handler())
			// Liveness here too: this listener has no connection cap,
			// so a probe pointed at it is answered while the API's port
			// holds clients back at --max-connections.
			mux.Handle("GET /healthz", a.api.Liveness())
		})
		if err != nil {
			return closeAll, err
		}
		started = append(started, side)
	}
	if a.cfg.PprofAddr != "" {
		side, addr, err := a.startSide(a.cfg.PprofAddr, a.cfg.PprofListener, "profiler", nil, func(mux *http.ServeMux) {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		})
		if err != nil {
			return closeAll, err
		}
		started = append(started, side)
		// It shows the process's memory and stacks, and costs CPU on
		// demand; its docs say to keep it on loopback.
		if tcp, ok := addr.(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
			a.log.Warn("the profiler is reachable beyond loopback: anyone who can connect may read its profiles; give --pprof-addr a loopback address (127.0.0.1:PORT)", "addr", addr.String())
		}
	}
	return closeAll, nil
}

// pruneEvents deletes the events older than the retention, now and then
// every tenth of it (at most hourly), until ctx ends. With several
// instances on one database each prunes; they take turns on the store.
func (a *App) pruneEvents(ctx context.Context) {
	every := min(a.cfg.EventRetention/10, time.Hour)
	for {
		n, err := a.store.PruneEvents(ctx, time.Now().Add(-a.cfg.EventRetention))
		switch {
		case err != nil && ctx.Err() == nil:
			a.log.Warn("pruning old events failed; trying again later", "err", err)
		case n > 0:
			a.log.Info("pruned old events", "events", n, "retention", a.cfg.EventRetention.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// MetricsAddr is the address the metrics listener bound, once Serve has
// started it ("" before, or when off).
func (a *App) MetricsAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.metricsAddr
}

// startSide serves routes on a listener of its own at addr (ln, when it
// is already bound), apart from the API, so what it serves is never
// reachable through the API's port. It logs the bound address, and
// records it in *bound unless bound is nil; it returns the bound address.
func (a *App) startSide(addr string, ln net.Listener, name string, bound *string, routes func(*http.ServeMux)) (*http.Server, net.Addr, error) {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, nil, fmt.Errorf("%s listen: %w", name, err)
		}
	}
	mux := http.NewServeMux()
	routes(mux)
	srv := &http.Server{Handler: httpapi.JSONErrors(mux), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
	if bound != nil {
		// The metrics: a scrape is answered in moments. (A profile takes
		// the seconds it is asked for.)
		srv.WriteTimeout = 30 * time.Second
	}
	go srv.Serve(ln)
	if bound != nil {
		a.mu.Lock()
		*bound = ln.Addr().String()
		a.mu.Unlock()
	}
	a.log.Info(name+" listening", "addr", ln.Addr().String())
	return srv, ln.Addr(), nil
}

// docsURL is where a person finds the API reference, for the listening
// line: under the public URL when there is one, else on the bound
// address, a wildcard one asked on loopback.
func (a *App) docsURL(scheme string, addr net.Addr) string {
	if a.cfg.API.PublicURL != "" {
		return a.cfg.API.PublicURL + "/docs"
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/docs"
}

// storeName is the store as logs show it: a URL's password masked.
func storeName(db string) string {
	if postgres.IsURL(db) {
		return postgres.RedactURL(db)
	}
	return db
}
