// Package app is plantstore's composition root: every part that
// "plantstore serve" runs, built in one place from one Config. Open opens
// the store and wires the authenticator, the HTTP API, the metrics and the
// webhook dispatcher; Serve serves them on a listener until its context
// ends, then stops them in order; Close releases the store. The command
// line only turns flags and environment into a Config, and the tests run
// the same App in-process.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/auth"
	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/metrics"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/webhook"
)

// Config is everything serve can be told. Zero values take the defaults
// of the packages they configure.
type Config struct {
	Store StoreConfig
	// API is the transport's configuration: limits, request timeout,
	// public URL, trusted proxies. Its Logger, AccessLog and Observer are
	// set by Open from the fields below.
	API httpapi.Config
	// Server bounds each connection: header and body read times, write
	// and idle times, header size.
	Server httpapi.ServerLimits
	// TLS, when set, makes Serve speak HTTPS.
	TLS *tls.Config
	// ShutdownTimeout is how long in-flight requests get to finish once
	// Serve's context ends; default 30 s.
	ShutdownTimeout time.Duration
	// MetricsAddr and PprofAddr, when set, are where Prometheus metrics
	// and Go's profiler are served, each on a listener of its own, never
	// on the API's.
	MetricsAddr, PprofAddr string
	Webhooks               WebhookConfig
	// Logger receives the service's log; AccessLog, when set, the access
	// log lines as JSON (httpapi.Config.AccessLog); otherwise they go to
	// Logger.
	Logger    *slog.Logger
	AccessLog io.Writer
	// OnListening, when set, is called once Serve listens and has logged
	// where: a log that buffers its lines can flush them, so scripts
	// waiting for the "listening" line see it at once.
	OnListening func()
	// EventRetention is how long the change feed keeps events; older
	// ones are pruned, and a client asking for them gets 410. Default
	// DefaultEventRetention.
	EventRetention time.Duration
	// TokenCacheTTL bounds how long a checked token is trusted without
	// asking the store again (auth.Options.CacheTTL); 0 for its default.
	TokenCacheTTL time.Duration
	// WrapStore, when set, stands between the store and everything that
	// uses it: tests inject faults with it.
	WrapStore func(plantstore.Store) plantstore.Store
}

// WebhookConfig tunes the delivery of events to subscribers.
type WebhookConfig struct {
	// AllowPrivate lets deliveries reach loopback, private and link-local
	// addresses; AllowMetadata, the cloud metadata and credential
	// endpoints, which AllowPrivate does not open.
	AllowPrivate, AllowMetadata bool
	Schedule                    webhook.Schedule
	// Timeout bounds one attempt, connection to answer.
	Timeout time.Duration
	// Poll, Lease, Workers and Concurrency: see webhook.DispatcherConfig.
	Poll, Lease          time.Duration
	Workers, Concurrency int
}

// DefaultShutdownTimeout is Config.ShutdownTimeout's default.
const DefaultShutdownTimeout = 30 * time.Second

// DefaultEventRetention is Config.EventRetention's default: a client that
// was away for up to a week resumes the feed where it left it. Webhook
// deliveries keep their own copy of their event, so retention never cuts
// one short.
const DefaultEventRetention = 7 * 24 * time.Hour

// App is a serving plantstore: its store and everything around it.
type App struct {
	cfg        Config
	log        *slog.Logger
	raw        plantstore.Store // as opened
	store      plantstore.Store // as the service uses it: wrapped, instrumented
	authn      *auth.Authenticator
	metrics    *metrics.Metrics // nil unless MetricsAddr is set
	dispatcher *webhook.Dispatcher
	server     *http.Server
	wake       chan struct{}
	// eventsWritten wakes the event streams' reader; a pending wake-up
	// covers any number of writes.
	eventsWritten chan struct{}
	// metricsAddr and pprofAddr are where the side listeners bound, once
	// Serve has started them.
	mu                     sync.Mutex
	metricsAddr, pprofAddr string
}

// Open opens the store and builds every part of the service around it. It
// listens on nothing yet: Serve does.
func Open(ctx context.Context, cfg Config) (*App, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.EventRetention <= 0 {
		cfg.EventRetention = DefaultEventRetention
	}
	a := &App{cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1), eventsWritten: make(chan struct{}, 1)}
	// A write that enqueued deliveries wakes the dispatcher; a wake already
	// pending covers it.
	hooks := StoreHooks{Enqueued: func() {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}, Created: func(path string) {
		// A new, empty store is worth a line: a mistyped --db, or a
		// directory other than the one meant, shows here.
		a.log.Info("created a new store", "path", path)
	}, EventsWritten: func() {
		select {
		case a.eventsWritten <- struct{}{}:
		default:
		}
	}, Logger: a.log}
	// Metrics, when asked for, watch the transport, the store and the
	// dispatcher through hooks; when not, nothing is wrapped.
	if cfg.MetricsAddr != "" {
		a.metrics = metrics.New()
		hooks.ObserveBatch = a.metrics.ObserveBatch
	}
	store, err := OpenStore(ctx, cfg.Store, true, hooks)
	if err != nil {
		return nil, err
	}
	// What is unsafe about the store's setting, said once at start:
	// files others can read, a connection that could be read or faked.
	for _, w := range StoreWarnings(cfg.Store.DB) {
		a.log.Warn(w)
	}
	a.raw, a.store = store, store
	if cfg.WrapStore != nil {
		a.store = cfg.WrapStore(a.store)
	}
	if a.metrics != nil {
		a.store = a.metrics.InstrumentStore(a.store)
	}
	hookClient := webhook.NewClient(webhook.ClientOptions{AllowPrivate: cfg.Webhooks.AllowPrivate,
		AllowMetadata: cfg.Webhooks.AllowMetadata, Timeout: cfg.Webhooks.Timeout, IdlePerHost: cfg.Webhooks.Concurrency})
	a.dispatcher, err = webhook.NewDispatcher(webhook.DispatcherConfig{
		Store:          a.store,
		Client:         hookClient,
		Schedule:       cfg.Webhooks.Schedule,
		Log:            a.log,
		Workers:        cfg.Webhooks.Workers,
		Concurrency:    cfg.Webhooks.Concurrency,
		Poll:           cfg.Webhooks.Poll,
		Lease:          cfg.Webhooks.Lease,
		AttemptTimeout: cfg.Webhooks.Timeout,
		Wake:           a.wake,
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	a.authn = auth.New(a.store, auth.Options{Logger: a.log, CacheTTL: cfg.TokenCacheTTL})
	if a.metrics != nil {
		a.metrics.TokenCache(func() (int64, int64) { s := a.authn.Stats(); return s.Hits, s.Misses })
		a.metrics.Webhooks(func() metrics.WebhookStats {
			s := a.dispatcher.Stats()
			return metrics.WebhookStats{Attempts: s.Attempts, Delivered: s.Delivered, Retried: s.Retried, Failed: s.Failed, Disabled: s.Disabled}
		}, a.store)
	}
	api := cfg.API
	api.Logger, api.AccessLog = a.log, cfg.AccessLog
	api.TLS = cfg.TLS != nil
	// The transport keeps the header limit exactly; Go's server, with its
	// slack, only beyond it.
	api.MaxHeaderBytes = cfg.Server.MaxHeaderBytes
	if api.MaxHeaderBytes <= 0 {
		api.MaxHeaderBytes = httpapi.DefaultMaxHeaderBytes
	}
	// A body's own deadline shortens the connection's read timeout, never
	// extends it.
	if api.BodyReadTimeout <= 0 {
		api.BodyReadTimeout = httpapi.DefaultBodyReadTimeout
	}
	if rt := cfg.Server.ReadTimeout; rt > 0 && rt < api.BodyReadTimeout {
		api.BodyReadTimeout = rt
	}
	if a.metrics != nil {
		api.Observer = a.metrics
	}
	// The streams' reader looks for events no signal reported (say, with
	// LISTEN unavailable through a pooler) as often as the dispatcher
	// looks for deliveries.
	api.EventsWritten = a.eventsWritten
	if api.EventPoll <= 0 {
		api.EventPoll = cfg.Webhooks.Poll
	}
	handler := httpapi.NewServer(a.store, a.authn, api)
	a.server = httpapi.NewHTTPServer(handler, cfg.Server)
	// Event streams never end by themselves: at shutdown they are closed,
	// and their clients reconnect and resume.
	a.server.RegisterOnShutdown(handler.CloseStreams)
	a.server.ErrorLog = slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)
	return a, nil
}

// Serve answers the API on ln until ctx ends, then lets the requests in
// flight finish (within ShutdownTimeout), stops the background work and
// returns. The webhook dispatcher stops after the API, so creates answered
// during the shutdown still have their deliveries, which go out now or at
// the next start.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	scheme := "http"
	if a.cfg.TLS != nil {
		ln = httpapi.TLSListener(ln, a.cfg.TLS, a.log)
		scheme = "https"
	}
	a.log.Info("listening", "addr", ln.Addr().String(), "scheme", scheme, "db", storeName(a.cfg.Store.DB),
		"docs", a.docsURL(scheme, ln.Addr()))
	if a.cfg.OnListening != nil {
		a.cfg.OnListening()
	}
	if a.metrics != nil {
		side, err := a.startSide(a.cfg.MetricsAddr, "metrics", &a.metricsAddr, func(mux *http.ServeMux) {
			mux.Handle("GET /metrics", a.metrics.Handler())
		})
		if err != nil {
			return err
		}
		defer side.Close()
	}
	if a.cfg.PprofAddr != "" {
		side, err := a.startSide(a.cfg.PprofAddr, "profiler", &a.pprofAddr, func(mux *http.ServeMux) {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		})
		if err != nil {
			return err
		}
		defer side.Close()
	}

	var background sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	background.Go(func() { a.authn.Run(bgCtx) })
	background.Go(func() { a.pruneEvents(bgCtx) })
	dispatchCtx, stopDispatch := context.WithCancel(context.WithoutCancel(ctx))
	var dispatching sync.WaitGroup
	dispatching.Go(func() { a.dispatcher.Run(dispatchCtx) })

	serveErr := make(chan error, 1)
	go func() { serveErr <- a.server.Serve(httpapi.JSONErrorListener(ln, a.log)) }()
	var err error
	select {
	case err = <-serveErr:
	case <-ctx.Done():
		a.log.Info("shutting down", "timeout", a.cfg.ShutdownTimeout.String())
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ShutdownTimeout)
		err = a.server.Shutdown(shutdownCtx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("in-flight requests did not finish within %s", a.cfg.ShutdownTimeout)
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	stopDispatch()
	dispatching.Wait()
	stopBackground()
	background.Wait()
	if err == nil {
		a.log.Info("stopped")
	}
	return err
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

// Close releases the store; call it once Serve has returned (or instead
// of Serve).
func (a *App) Close() error { return a.raw.Close() }

// Store is the App's store as opened, without what Config.WrapStore or
// the metrics put around it, for tests and tools beside the server.
func (a *App) Store() plantstore.Store { return a.raw }

// MetricsAddr and PprofAddr are the addresses the side listeners bound,
// once Serve has started them ("" before, or when off).
func (a *App) MetricsAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.metricsAddr
}

// startSide serves routes on a listener of its own at addr, apart from the
// API, so what it serves is never reachable through the API's port. It
// records the bound address in *bound and logs it.
func (a *App) startSide(addr, name string, bound *string, routes func(*http.ServeMux)) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listen: %w", name, err)
	}
	mux := http.NewServeMux()
	routes(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
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
