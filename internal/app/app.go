// Package app is plantstore's composition root: every part that
// "plantstore serve" runs, built in one place from one Config (config.go).
// This file is the whole of it: Open opens the store and builds the
// webhook dispatcher, the authenticator, the metrics and the HTTP API
// (each step in wiring.go); Serve serves them on a listener, with the side
// listeners and background loops of side.go, until its context ends, then
// stops them in order; Close releases the store. The command line only
// turns flags and environment into a Config, and the tests run the same
// App in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/auth"
	"github.com/plantstore/plantstore/internal/http1"
	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/metrics"
	"github.com/plantstore/plantstore/internal/webhook"
)

// App is a serving plantstore: its store and everything around it.
type App struct {
	cfg        Config
	log        *slog.Logger
	raw        plantstore.Store // as opened
	store      plantstore.Store // as the service uses it: wrapped, instrumented
	authn      *auth.Authenticator
	metrics    *metrics.Metrics // nil unless MetricsAddr is set
	dispatcher *webhook.Dispatcher
	api        *httpapi.Server     // the handler of server
	server     *httpapi.HTTPServer // serves what fast hands it
	fast       *http1.Server
	// conns counts the API listener's connections, for the metrics.
	conns httpapi.ConnCounts
	wake  chan struct{}
	// eventsWritten wakes the event streams' reader; a pending wake-up
	// covers any number of writes.
	eventsWritten chan struct{}
	// metricsAddr is where the metrics listener bound, once Serve has
	// started it.
	mu          sync.Mutex
	metricsAddr string
}

// Open opens the store and builds every part of the service around it,
// each step in a function of wiring.go. It listens on nothing yet: Serve
// does.
func Open(ctx context.Context, cfg Config) (*App, error) {
	cfg = withDefaults(cfg)
	a := &App{cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1), eventsWritten: make(chan struct{}, 1)}
	// Metrics, when asked for, watch the transport, the store and the
	// dispatcher through hooks; when not, nothing is wrapped.
	if cfg.MetricsAddr != "" {
		a.metrics = metrics.New()
	}
	if err := a.openStore(ctx); err != nil {
		return nil, err
	}
	if err := a.newDispatcher(); err != nil {
		a.raw.Close()
		return nil, err
	}
	a.newAuthenticator()
	a.watch()
	a.newHTTPServer()
	return a, nil
}

// ErrUnfinished is Serve's error when requests were still running at the
// end of ShutdownTimeout: their connections were closed without an answer,
// and one may still be waiting on the store (for a lock another process
// holds), so the caller need not wait for Close as long as it would.
var ErrUnfinished = errors.New("in-flight requests did not finish")

// Serve answers the API on ln until ctx ends, then lets the requests in
// flight finish (within ShutdownTimeout), stops the background work and
// returns. The webhook dispatcher stops after the API, so creates answered
// during the shutdown still have their deliveries, which go out now or at
// the next start.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	scheme := "http"
	// Counted before TLS, so that handshakes hold a place too. The
	// metrics count the connections open even with no cap.
	var counts *httpapi.ConnCounts
	if a.metrics != nil {
		counts = &a.conns
	}
	ln = httpapi.LimitConnections(ln, httpapi.ConnLimits{Max: a.cfg.Server.MaxConnections,
		PerAddress: a.cfg.Server.MaxConnectionsPerAddress, Exempt: a.cfg.API.TrustedProxies}, a.log, counts)
	if a.cfg.TLS != nil {
		ln = httpapi.TLSListener(ln, a.cfg.TLS, a.log, a.observer())
		scheme = "https"
	}
	closeSides, err := a.startSides()
	defer closeSides()
	if err != nil {
		return err
	}
	// The failed-authentication throttle knows the tokens on the roster
	// from the first request on (authn.Run reads it again from then on).
	if err := a.authn.RefreshRoster(ctx); err != nil {
		a.log.Warn("read the roster of active tokens", "err", err)
	}
	// Said once every listener serves: a side listener that fails stops
	// the start before anyone is told it is up.
	a.log.Info("listening", "addr", ln.Addr().String(), "scheme", scheme, "db", storeName(a.cfg.Store.DB),
		"docs", a.docsURL(scheme, ln.Addr()), "gomaxprocs", runtime.GOMAXPROCS(0))
	if a.cfg.OnListening != nil {
		a.cfg.OnListening()
	}

	var background sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	background.Go(func() { a.authn.Run(bgCtx) })
	background.Go(func() { a.pruneEvents(bgCtx) })
	dispatchCtx, stopDispatch := context.WithCancel(context.WithoutCancel(ctx))
	var dispatching sync.WaitGroup
	dispatching.Go(func() { a.dispatcher.Run(dispatchCtx) })

	serveErr := make(chan error, 1)
	// net/http serves the connections the fast path hands it; its Serve
	// ends at its Shutdown.
	go func() {
		// The fast path's Shutdown closes the handoffs (net.ErrClosed),
		// and may do so before net/http's own Shutdown has begun: both
		// are the end of serving, not a failure.
		err := a.server.Serve(httpapi.JSONErrorListener(a.fast.Handoffs(), a.log, a.observer()))
		if !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			a.log.Error("serving the connections handed to net/http failed", "err", err)
		}
	}()
	go func() { serveErr <- a.fast.Serve(ln) }()
	served := false // serving ended by itself, with err
	select {
	case err = <-serveErr:
		served = true
	case <-ctx.Done():
		// What stopped it, when ctx says (a signal: see cmd/plantstore),
		// so that a stop by log rotation's SIGHUP is told from an
		// orchestrator's SIGTERM.
		if cause := StopCause(ctx); cause != nil {
			a.log.Info("stop asked", cause...)
		}
		if a.cfg.DrainDelay > 0 {
			a.log.Info("draining: /readyz answers 503 while requests are still served", "delay", a.cfg.DrainDelay.String())
			a.api.Drain()
			select {
			case err = <-serveErr:
				served = true
			case <-time.After(a.cfg.DrainDelay):
			}
		}
	}
	if served {
		a.server.Close()
	} else {
		a.log.Info("shutting down", "timeout", a.cfg.ShutdownTimeout.String())
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ShutdownTimeout)
		fastErr := make(chan error, 1)
		go func() { fastErr <- a.fast.Shutdown(shutdownCtx) }()
		err = errors.Join(a.server.Shutdown(shutdownCtx), <-fastErr)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			// Their connections close without an answer (net/http's
			// Shutdown leaves them open; the fast path's closes its own),
			// so none is answered after the process says it stopped.
			a.server.Close()
			err = fmt.Errorf("%w within %s", ErrUnfinished, a.cfg.ShutdownTimeout)
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	a.api.FlushErrorLog()
	stopDispatch()
	dispatching.Wait()
	stopBackground()
	background.Wait()
	if err == nil {
		a.log.Info("stopped")
	} else {
		// Also in the log's format, for whatever reads it; the caller
		// says it on stderr as well.
		a.log.Error("stopped", "err", err.Error())
	}
	return err
}

// observer counts the requests refused before any handler ran with the
// others, when there are metrics; nil, not a nil *metrics.Metrics, when
// there are none.
func (a *App) observer() httpapi.Observer {
	if a.metrics == nil {
		return nil
	}
	return a.metrics
}

// Close releases the store; call it once Serve has returned (or instead
// of Serve).
func (a *App) Close() error { return a.raw.Close() }

// Store is the App's store as opened, without what Config.WrapStore or
// the metrics put around it, for tests and tools beside the server.
func (a *App) Store() plantstore.Store { return a.raw }

// StopCause is what a log line says of why ctx ended: its cause, when it
// has one of its own (cmd/plantstore gives the signal's), as attributes
// for slog; nil otherwise.
func StopCause(ctx context.Context) []any {
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return []any{"cause", cause.Error()}
	}
	return nil
}
