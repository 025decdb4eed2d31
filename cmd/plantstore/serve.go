package main

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
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/plantstore/plantstore/internal/auth"
	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/metrics"
	"github.com/plantstore/plantstore/internal/webhook"
)

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", `serve [flags]

Serves the Plant Store API over HTTP on the store at --db (a SQLite file,
or a PostgreSQL database that several servers may share), until
SIGTERM or SIGINT. Every flag can also be set by the environment variable
shown beside it.`, getenv, stdout, stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "`HOST:PORT` to listen on")
	dbFlags := addDBFlags(fs)
	maxBody := fs.Int64("max-body-bytes", httpapi.DefaultMaxBodyBytes, "largest request body accepted, in `BYTES`; larger gets 413")
	maxHeader := fs.Int64("max-header-bytes", 16<<10, "largest request header block accepted, in `BYTES`; larger gets 431")
	readHeaderTimeout := fs.Duration("read-header-timeout", 5*time.Second, "time a client has to send the request headers")
	readTimeout := fs.Duration("read-timeout", 30*time.Second, "time a client has to send the whole request")
	writeTimeout := fs.Duration("write-timeout", 30*time.Second, "time to write the answer, from the end of the headers")
	idleTimeout := fs.Duration("idle-timeout", 120*time.Second, "time an idle keep-alive connection stays open")
	requestTimeout := fs.Duration("request-timeout", httpapi.DefaultRequestTimeout, "time the service may work on one request before answering 503")
	tlsCert := fs.String("tls-cert", "", "`FILE` with the TLS certificate chain (PEM): serve HTTPS, TLS 1.2 at least; needs --tls-key")
	tlsKey := fs.String("tls-key", "", "`FILE` with the TLS private key (PEM)")
	publicURL := fs.String("public-url", "", "`URL` clients reach the API at, behind a proxy or under a path prefix: makes Link headers absolute and names it in the served document's servers")
	shutdownTimeout := fs.Duration("shutdown-timeout", 30*time.Second, "time in-flight requests get to finish after SIGTERM or SIGINT")
	limits := addLimitFlags(fs)
	metricsAddr := fs.String("metrics-addr", "", "`HOST:PORT` to serve Prometheus metrics on (GET /metrics), apart from the API; off when empty")
	pprofAddr := fs.String("pprof-addr", "", "`HOST:PORT` to serve Go's profiler (net/http/pprof) on, apart from the API; off when empty. Keep it on loopback")
	hooks := addWebhookFlags(fs)
	logFormat := fs.String("log-format", "json", "log format: json or text")
	logLevel := fs.String("log-level", "info", "least severe log level: debug, info, warn or error")
	if rest, err := fs.parse(args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError(fmt.Sprintf("serve takes no arguments, got %q", rest))
	}
	// The plants commands' variables may share serve's environment.
	if err := fs.checkVariables(os.Environ(), "PLANTSTORE_SERVER", "PLANTSTORE_TOKEN"); err != nil {
		return err
	}
	logs := newBufferedLog(stderr)
	defer logs.Flush()
	log, err := newLogger(logs, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	apiConfig := httpapi.Config{MaxBodyBytes: *maxBody, RequestTimeout: *requestTimeout, Logger: log}
	if *logFormat == "json" && log.Enabled(ctx, slog.LevelInfo) {
		apiConfig.AccessLog = logs // the same lines, formatted by httpapi itself
	}
	if err := limits.apply(&apiConfig); err != nil {
		return err
	}
	if *publicURL != "" {
		if apiConfig.PublicURL, err = httpapi.ParsePublicURL(*publicURL); err != nil {
			return usageError("--public-url: " + err.Error())
		}
	}
	var tlsConfig *tls.Config
	switch {
	case (*tlsCert == "") != (*tlsKey == ""):
		return usageError("--tls-cert and --tls-key go together")
	case *tlsCert != "":
		if tlsConfig, err = httpapi.TLSConfig(*tlsCert, *tlsKey); err != nil {
			return usageError(err.Error())
		}
	}

	schedule, err := hooks.schedule()
	if err != nil {
		return err
	}
	// A create that enqueued deliveries wakes the dispatcher; a wake
	// already pending covers it.
	wake := make(chan struct{}, 1)
	enqueued := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	// Metrics, when asked for, watch the transport, the store and the
	// dispatcher through hooks; when not, nothing is wrapped.
	var m *metrics.Metrics
	hooksOfStore := storeHooks{enqueued: enqueued}
	if *metricsAddr != "" {
		m = metrics.New()
		hooksOfStore.observeBatch = m.ObserveBatch
	}
	store, err := dbFlags.openServer(ctx, hooksOfStore)
	if err != nil {
		return err
	}
	defer store.Close()
	if m != nil {
		store = m.InstrumentStore(store)
		apiConfig.Observer = m
	}
	dispatcher, err := webhook.NewDispatcher(webhook.DispatcherConfig{
		Store:          store,
		Client:         webhook.NewClient(webhook.ClientOptions{AllowPrivate: *hooks.allowPrivate, Timeout: *hooks.timeout}),
		Schedule:       schedule,
		Log:            log,
		Workers:        int(*hooks.workers),
		Poll:           *hooks.poll,
		Lease:          *hooks.lease,
		AttemptTimeout: *hooks.timeout,
		Wake:           wake,
	})
	if err != nil {
		return err
	}

	authn := auth.New(store, auth.Options{Logger: log})
	if m != nil {
		m.TokenCache(func() (int64, int64) { s := authn.Stats(); return s.Hits, s.Misses })
		m.Webhooks(func() metrics.WebhookStats {
			s := dispatcher.Stats()
			return metrics.WebhookStats{Attempts: s.Attempts, Delivered: s.Delivered, Retried: s.Retried, Failed: s.Failed, Disabled: s.Disabled}
		}, store)
	}
	api := httpapi.NewServer(store, authn, apiConfig)
	srv := httpapi.NewHTTPServer(api, httpapi.Limits{
		ReadHeaderTimeout: *readHeaderTimeout,
		ReadTimeout:       *readTimeout,
		WriteTimeout:      *writeTimeout,
		IdleTimeout:       *idleTimeout,
		MaxHeaderBytes:    int(*maxHeader),
	})
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	scheme := "http"
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
		scheme = "https"
	}
	log.Info("listening", "addr", ln.Addr().String(), "scheme", scheme, "db", dbFlags.db.String())
	logs.Flush() // scripts wait for this line

	if m != nil {
		metricsServer, err := startSideServer(*metricsAddr, "metrics", func(mux *http.ServeMux) {
			mux.Handle("GET /metrics", m.Handler())
		})
		if err != nil {
			return err
		}
		defer metricsServer.Close()
		log.Info("metrics listening", "addr", metricsServer.Addr)
	}
	if *pprofAddr != "" {
		profiler, err := startProfiler(*pprofAddr)
		if err != nil {
			return err
		}
		defer profiler.Close()
		log.Info("profiler listening", "addr", *pprofAddr)
	}

	var background sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	background.Go(func() { authn.Run(bgCtx) })
	background.Go(func() { logs.run(bgCtx) })
	// The dispatcher stops after the API: creates answered during the
	// shutdown still have their deliveries, which go out now or at the
	// next start.
	dispatchCtx, stopDispatch := context.WithCancel(context.WithoutCancel(ctx))
	var dispatching sync.WaitGroup
	dispatching.Go(func() { dispatcher.Run(dispatchCtx) })

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(httpapi.JSONErrorListener(ln, log)) }()

	select {
	case err = <-serveErr:
	case <-ctx.Done():
		log.Info("shutting down", "timeout", shutdownTimeout.String())
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *shutdownTimeout)
		err = srv.Shutdown(shutdownCtx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("in-flight requests did not finish within %s", *shutdownTimeout)
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
		log.Info("stopped")
	}
	return err
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError(fmt.Sprintf("--log-level %q: want debug, info, warn or error", level))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, usageError(fmt.Sprintf("--log-format %q: want json or text", format))
}

// startProfiler serves net/http/pprof on its own listener, so profiles are
// never reachable through the API's port.
func startProfiler(addr string) (*http.Server, error) {
	return startSideServer(addr, "pprof", func(mux *http.ServeMux) {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	})
}

// startSideServer serves routes on a listener of its own at addr, apart
// from the API, so what it serves is never reachable through the API's
// port. The returned server's Addr is the bound address.
func startSideServer(addr, name string, routes func(*http.ServeMux)) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listen: %w", name, err)
	}
	mux := http.NewServeMux()
	routes(mux)
	srv := &http.Server{Handler: mux, Addr: ln.Addr().String(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return srv, nil
}

// webhookFlags tune the delivery of new-plant events.
type webhookFlags struct {
	allowPrivate    *bool
	retrySchedule   *string
	maxAge, timeout *time.Duration
	poll, lease     *time.Duration
	workers         *int64
}

func addWebhookFlags(fs *flagSet) webhookFlags {
	return webhookFlags{
		allowPrivate:  fs.Bool("allow-private-webhooks", false, "let webhooks reach loopback, private and link-local addresses (tests, or subscribers on your own network); refused by default, checked at connect time"),
		retrySchedule: fs.String("webhook-retry-schedule", "5s,30s,2m,10m,1h", "waits between a webhook delivery's failed attempts; the last repeats"),
		maxAge:        fs.Duration("webhook-max-age", webhook.DefaultSchedule.MaxAge, "how long a webhook delivery is retried, from its plant's creation, before it is marked failed"),
		timeout:       fs.Duration("webhook-timeout", 10*time.Second, "time one webhook attempt may take, connection to answer"),
		poll:          fs.Duration("webhook-poll", time.Second, "how often to look for due webhook deliveries when no create of this process signals one (bounds how soon instances send what others enqueued)"),
		lease:         fs.Duration("webhook-lease", 30*time.Second, "how long a subscriber stays with one instance without renewal; a crashed instance's subscribers are taken over after it (at least 3x --webhook-timeout)"),
		workers:       fs.Int64("webhook-workers", 16, "subscribers served at once; a slow one holds one worker, never the others"),
	}
}

func (f webhookFlags) schedule() (webhook.Schedule, error) {
	intervals, err := webhook.ParseIntervals(*f.retrySchedule)
	if err != nil {
		return webhook.Schedule{}, usageError("--webhook-retry-schedule: " + err.Error())
	}
	if *f.workers < 1 || *f.workers > 1024 {
		return webhook.Schedule{}, usageError("--webhook-workers must be between 1 and 1024")
	}
	return webhook.Schedule{Intervals: intervals, MaxAge: *f.maxAge}, nil
}

// limitFlags are the request limits: a cap on requests in flight, a rate
// per token, and a throttle on failed authentication per address.
type limitFlags struct {
	maxInFlight, rate, burst *int64
	authFailures             *int64
	authFailureWindow        *time.Duration
	proxies                  *string
}

func addLimitFlags(fs *flagSet) limitFlags {
	return limitFlags{
		maxInFlight:       fs.Int64("max-in-flight", 1024, "plant operations served at once; more get 503 at once (0: no cap)"),
		rate:              fs.Int64("rate-limit", 0, "requests per second each token may make; more get 429 (0: no limit)"),
		burst:             fs.Int64("rate-burst", 0, "requests a token may make at once within --rate-limit (0: twice the rate)"),
		authFailures:      fs.Int64("auth-failure-limit", 10, "refused tokens one client address may send per --auth-failure-window; then all its plant operations get 429, its tokens unchecked, until it has an attempt again (0: no limit)"),
		authFailureWindow: fs.Duration("auth-failure-window", httpapi.DefaultAuthFailureWindow, "the window of --auth-failure-limit; an address regains one attempt every window/limit"),
		proxies:           fs.String("trusted-proxies", "", "comma-separated `CIDRs` of proxies whose X-Forwarded-For names the client address for --auth-failure-limit; ignored from any other peer"),
	}
}

// apply sets the limits in cfg, or refuses them with a usage error.
func (f limitFlags) apply(cfg *httpapi.Config) error {
	if *f.burst > 0 && *f.rate == 0 {
		return usageError("--rate-burst needs --rate-limit")
	}
	for field := range strings.SplitSeq(*f.proxies, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		p, err := netip.ParsePrefix(field)
		if err != nil {
			addr, addrErr := netip.ParseAddr(field)
			if addrErr != nil {
				return usageError(fmt.Sprintf("--trusted-proxies: %q is not an address or a CIDR prefix", field))
			}
			addr = addr.Unmap()
			p = netip.PrefixFrom(addr, addr.BitLen())
		}
		cfg.TrustedProxies = append(cfg.TrustedProxies, p.Masked())
	}
	cfg.MaxInFlight = int(*f.maxInFlight)
	cfg.TokenRate = float64(*f.rate)
	cfg.TokenBurst = int(*f.burst)
	cfg.AuthFailures = int(*f.authFailures)
	cfg.AuthFailureWindow = *f.authFailureWindow
	return nil
}
