package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

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
		side, err := a.startSide(a.cfg.MetricsAddr, a.cfg.MetricsListener, "metrics", &a.metricsAddr, func(mux *http.ServeMux) {
			mux.Handle("GET /metrics", a.metrics.Handler())
		})
		if err != nil {
			return closeAll, err
		}
		started = append(started, side)
	}
	if a.cfg.PprofAddr != "" {
		side, err := a.startSide(a.cfg.PprofAddr, a.cfg.PprofListener, "profiler", &a.pprofAddr, func(mux *http.ServeMux) {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		})
		if err != nil {
			return closeAll, err
		}
		started = append(started, side)
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

// MetricsAddr and PprofAddr are the addresses the side listeners bound,
// once Serve has started them ("" before, or when off).
func (a *App) MetricsAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.metricsAddr
}

// startSide serves routes on a listener of its own at addr (ln, when it
// is already bound), apart from the API, so what it serves is never
// reachable through the API's port. It records the bound address in
// *bound and logs it.
func (a *App) startSide(addr string, ln net.Listener, name string, bound *string, routes func(*http.ServeMux)) (*http.Server, error) {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("%s listen: %w", name, err)
		}
	}
	mux := http.NewServeMux()
	routes(mux)
	srv := &http.Server{Handler: jsonErrors(mux), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	a.mu.Lock()
	*bound = ln.Addr().String()
	a.mu.Unlock()
	a.log.Info(name+" listening", "addr", ln.Addr().String())
	return srv, nil
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

// jsonErrors gives the side listeners' refusals (the mux's 404 and 405,
// a profile's bad parameters) the Error body every answer of the API's
// port has, their text as its message.
func jsonErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jw := &jsonErrorWriter{ResponseWriter: w}
		next.ServeHTTP(jw, r)
		if jw.status == 0 {
			return
		}
		body, _ := json.Marshal(struct {
			Error   int    `json:"error"`
			Message string `json:"message"`
		}{jw.status, strings.TrimSpace(jw.text.String())})
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(jw.status)
		w.Write(body)
	})
}

// jsonErrorWriter holds back a plain-text answer of 400 or more (what
// http.Error writes), for jsonErrors to send as JSON.
type jsonErrorWriter struct {
	http.ResponseWriter
	status int // the held answer's; 0 when none is held
	text   strings.Builder
}

func (w *jsonErrorWriter) WriteHeader(status int) {
	if status >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = status
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *jsonErrorWriter) Write(p []byte) (int, error) {
	if w.status != 0 {
		return w.text.Write(p)
	}
	return w.ResponseWriter.Write(p)
}

// Flush lets a profile or trace stream as it would unwrapped.
func (w *jsonErrorWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.status == 0 {
		f.Flush()
	}
}
