package app

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/plantstore/plantstore/internal/auth"
	"github.com/plantstore/plantstore/internal/http1"
	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/metrics"
	"github.com/plantstore/plantstore/internal/webhook"
)

// The steps of Open, in its order.

// withDefaults fills in what cfg leaves at zero.
func withDefaults(cfg Config) Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.EventRetention <= 0 {
		cfg.EventRetention = DefaultEventRetention
	}
	return cfg
}

// signal is a wake-up that a pending one covers: any number of sends
// between two receives wake the receiver once.
func signal(c chan struct{}) func() {
	return func() {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// openStore opens the store with the hooks that wake the dispatcher and
// the event streams, and puts around it what the service uses it
// through: the tests' wrapper, the metrics.
func (a *App) openStore(ctx context.Context) error {
	hooks := StoreHooks{
		Enqueued:      signal(a.wake),
		EventsWritten: signal(a.eventsWritten),
		Created: func(path string) {
			// A new, empty store is worth a line, at a level a log kept
			// to warnings shows: a mistyped --db, or a directory other
			// than the one meant, shows here.
			a.log.Warn("created a new store", "path", path)
		},
		Logger: a.log,
	}
	if a.metrics != nil {
		hooks.ObserveBatch = a.metrics.ObserveBatch
	}
	store, err := OpenStore(ctx, a.cfg.Store, true, hooks)
	if err != nil {
		return err
	}
	// What is unsafe about the store's setting, said once at start:
	// files others can read, a connection that could be read or faked.
	for _, w := range StoreWarnings(a.cfg.Store.DB) {
		a.log.Warn(w)
	}
	a.raw, a.store = store, store
	if a.cfg.WrapStore != nil {
		a.store = a.cfg.WrapStore(a.store)
	}
	if a.metrics != nil {
		a.store = a.metrics.InstrumentStore(a.store)
	}
	return nil
}

// newDispatcher builds the webhook dispatcher, which a write that
// enqueued deliveries wakes.
func (a *App) newDispatcher() (err error) {
	hooks := a.cfg.Webhooks
	// Saturated: one goroutine in ten waits 250 µs or more for a CPU.
	// Measured (the 90th percentile, over 200 ms): under creates at 1,000
	// to 6,000 a second, 6-164 µs, on one pinned core as on two CPUs
	// shared with the load; under a closed loop that saturates them,
	// 328-655 µs pinned and 393-524 µs unpinned, which the former 500 µs
	// mostly missed. A saturated look holds 200 ms: under a saturating
	// load one look in a few still falls under (measured: 48 to 1,049
	// deliveries a second went out under the load without the hold).
	saturated := newSaturation(250*time.Microsecond, 10*time.Millisecond, 200*time.Millisecond)
	client := webhook.NewClient(webhook.ClientOptions{AllowPrivate: hooks.AllowPrivate,
		AllowMetadata: hooks.AllowMetadata, Timeout: hooks.Timeout, IdlePerHost: hooks.Concurrency})
	a.dispatcher, err = webhook.NewDispatcher(webhook.DispatcherConfig{
		Store:          a.store,
		Client:         client,
		Schedule:       hooks.Schedule,
		Log:            a.log,
		Workers:        hooks.Workers,
		Concurrency:    hooks.Concurrency,
		Poll:           hooks.Poll,
		Lease:          hooks.Lease,
		AttemptTimeout: hooks.Timeout,
		Wake:           a.wake,
		// Clients' requests first, when they saturate the CPUs the
		// process may use; the handler is built next, and the dispatcher
		// runs once Serve starts.
		Busy: func() bool { return a.api.Busy() && saturated.Saturated() },
	})
	return err
}

// newAuthenticator builds the token check, in front of the store.
func (a *App) newAuthenticator() {
	a.authn = auth.New(a.store, auth.Options{Logger: a.log, CacheTTL: a.cfg.TokenCacheTTL, RosterInterval: a.cfg.TokenRosterInterval})
}

// watch lets the metrics read the token cache, the dispatcher, the API
// listener's connection counts (which Serve keeps in a.conns) and the TLS
// certificate in service.
func (a *App) watch() {
	if a.metrics == nil {
		return
	}
	a.metrics.Connections(a.cfg.Server.MaxConnections, func() metrics.ConnStats {
		return metrics.ConnStats{Open: a.conns.Open(), Waits: a.conns.Waits(), Refused: a.conns.Refused()}
	})
	a.metrics.TokenCache(func() (int64, int64) { s := a.authn.Stats(); return s.Hits, s.Misses })
	if tlsConfig := a.cfg.TLS; tlsConfig != nil && tlsConfig.GetCertificate != nil {
		a.metrics.TLSCertificate(func() time.Time {
			// What the next handshake would be given (and a look at
			// the files, at most once a second).
			cert, err := tlsConfig.GetCertificate(&tls.ClientHelloInfo{})
			if err != nil || cert == nil || cert.Leaf == nil {
				return time.Time{}
			}
			return cert.Leaf.NotAfter
		})
	}
	a.metrics.Webhooks(func() metrics.WebhookStats {
		s := a.dispatcher.Stats()
		return metrics.WebhookStats{Attempts: s.Attempts, Delivered: s.Delivered, Retried: s.Retried, Failed: s.Failed, Disabled: s.Disabled, Paused: s.Paused}
	}, a.store)
}

// newHTTPServer builds the API's handler and its HTTP server.
func (a *App) newHTTPServer() {
	cfg := a.cfg
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
	// extends it: it replaces the deadline of the whole request, so it is
	// at most what --read-timeout leaves once the head has had all of
	// --read-header-timeout. Head and body then never take longer than
	// --read-timeout together.
	if api.BodyReadTimeout <= 0 {
		api.BodyReadTimeout = httpapi.DefaultBodyReadTimeout
	}
	limits := cfg.Server.WithDefaults()
	if rt, rht := limits.ReadTimeout, limits.ReadHeaderTimeout; rt > 0 {
		left := rt
		if rht > 0 && rht < rt {
			left = rt - rht
		}
		api.BodyReadTimeout = min(api.BodyReadTimeout, left)
	}
	api.Observer = a.observer()
	// The streams' reader looks for events no signal reported (say, with
	// LISTEN unavailable through a pooler) as often as the dispatcher
	// looks for deliveries.
	api.EventsWritten = a.eventsWritten
	if api.EventPoll <= 0 {
		api.EventPoll = cfg.Webhooks.Poll
	}
	handler := httpapi.NewServer(a.store, a.authn, api)
	a.api = handler
	a.server = httpapi.NewHTTPServer(handler, cfg.Server)
	// Event streams never end by themselves: at shutdown they are closed,
	// and their clients reconnect and resume.
	a.server.RegisterOnShutdown(handler.CloseStreams)
	a.server.ErrorLog = slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)
	// The plant operations' plain requests are answered by a leaner
	// HTTP/1.1 server, which hands every other connection to net/http
	// (internal/http1; BENCHMARKS.md has what it saves).
	a.fast = http1.New(handler, httpapi.FastRoute, http1.Limits{
		ReadHeaderTimeout: limits.ReadHeaderTimeout,
		ReadTimeout:       limits.ReadTimeout,
		WriteTimeout:      limits.WriteTimeout,
		IdleTimeout:       limits.IdleTimeout,
	}, a.log)
	a.fast.Reject = httpapi.Rejection(a.log, a.observer())
}
