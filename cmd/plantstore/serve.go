package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/plantstore/plantstore/internal/app"
	"github.com/plantstore/plantstore/internal/cpulimit"
	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/webhook"
)

func runServe(ctx context.Context, args []string, env environment, stdout, stderr io.Writer) (err error) {
	fs := newFlagSet("serve", `serve [flags]

Serves the Plant Store API over HTTP on the store at --db (a SQLite file,
or a PostgreSQL database that several servers may share), until
SIGTERM, SIGINT or SIGHUP. Every flag can also be set by the environment variable
shown beside it.`, env.getenv, stdout, stderr)
	flags := addServeFlags(fs)
	if rest, err := fs.parse(args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError(fmt.Sprintf("serve takes no arguments, got %q", rest))
	}
	warnings, err := checkVariables(env.environ, knownVariables())
	if err != nil {
		return err
	}
	logs := newBufferedLog(stderr)
	defer logs.FlushWithin(lastFlushWait)
	log, err := newLogger(logs, *flags.logFormat, *flags.logLevel)
	if err != nil {
		return err
	}
	logs.onDropped = func(lines int64) {
		log.Warn("log lines dropped: standard error was not read in time", "lines", lines)
	}
	// A log whose reader has gone (a closed pipe) fails its writes, and
	// the lines are lost; the service goes on, where SIGPIPE would end it
	// without a word.
	brokenPipeFails()
	for _, w := range warnings {
		log.Warn(w)
	}
	log.Debug("settings", fs.settings()...)
	fitProcsToQuota(env.getenv, log)
	cfg, err := flags.config(ctx, log, logs)
	if err != nil {
		return err
	}
	// Listen first, on every address: one that cannot be used (a typo, a
	// port in use) is said before a new, empty store is made.
	ln, err := listenAll(&cfg, *flags.addr)
	if err != nil {
		return err
	}
	a, err := app.Open(ctx, cfg)
	if err != nil {
		closeListeners(ln, cfg.MetricsListener, cfg.PprofListener)
		if ctx.Err() != nil {
			// Stopped while the store opened (waiting for another
			// process's lock, or for PostgreSQL): a stop asked for, as
			// any other, not a failure of the store.
			log.Info("stopped before serving: the store was still opening", app.StopCause(ctx)...)
			return nil
		}
		return dbMistake(err)
	}
	defer func() {
		if errors.Is(err, app.ErrUnfinished) {
			// A request cut off may still wait on the store, as long as
			// --busy-timeout when another process holds its lock, and
			// Close waits for it. The process need not: whatever was
			// answered 200 is on disk, and SQLite recovers its log at
			// the next start, as after a crash.
			within(unfinishedCloseWait, func() { a.Close() })
			return
		}
		if cerr := a.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the store: %w", cerr)
		}
	}()
	var flushing sync.WaitGroup
	flushCtx, stopFlushing := context.WithCancel(context.WithoutCancel(ctx))
	flushing.Go(func() { logs.run(flushCtx) })
	defer func() {
		stopFlushing()
		// A flush caught in a write to a stalled reader would hold the
		// flusher, and the exit, until the reader is back.
		within(lastFlushWait, flushing.Wait)
	}()
	return a.Serve(ctx, ln)
}

// unfinishedCloseWait bounds closing the store after a shutdown that ran
// out of time.
const unfinishedCloseWait = 2 * time.Second

// serveFlags are serve's flags, as parsed.
type serveFlags struct {
	addr                                    *string
	db                                      dbFlags
	maxBody, maxHeader                      *int64
	readHeaderTimeout, readTimeout          *time.Duration
	writeTimeout, idleTimeout               *time.Duration
	requestTimeout, shutdownTimeout         *time.Duration
	drainDelay                              *time.Duration
	maxConns                                *int64
	maxConnsPerAddress                      *int64
	tlsCert, tlsKey, publicURL, corsOrigins *string
	limits                                  limitFlags
	metricsAddr, pprofAddr                  *string
	hooks                                   webhookFlags
	events                                  eventFlags
	logFormat, logLevel                     *string
}

// eventFlags tune the change feed, GET /events.
type eventFlags struct {
	retention                   *time.Duration
	maxStreams, streamsPerToken *int64
}

func addEventFlags(fs *flagSet) eventFlags {
	return eventFlags{
		retention:       fs.Duration("event-retention", app.DefaultEventRetention, "how long the change feed keeps events; a client asking for older ones gets 410 and resyncs (at least 1m)"),
		maxStreams:      fs.Int64("max-streams", httpapi.DefaultMaxStreams, "event streams (GET /events as Server-Sent Events) open at once; more get 503"),
		streamsPerToken: fs.Int64("max-streams-per-token", httpapi.DefaultMaxStreamsPerToken, "event streams of one token open at once; more get 429"),
	}
}

// apply sets the feed's settings in cfg, or refuses them.
func (f eventFlags) apply(cfg *app.Config) error {
	if *f.retention < time.Minute {
		return usageError(fmt.Sprintf("--event-retention %s: want 1m or more", *f.retention))
	}
	if *f.maxStreams < 1 || *f.streamsPerToken < 1 {
		return usageError("--max-streams and --max-streams-per-token must be 1 or more")
	}
	cfg.EventRetention = *f.retention
	cfg.API.MaxStreams = int(*f.maxStreams)
	cfg.API.MaxStreamsPerToken = int(*f.streamsPerToken)
	return nil
}

// defaultMaxConnections bounds what idle connections can cost: about
// 20 KiB each (docs/limits.md), 80 MiB at the cap, with room for the
// default --max-streams and --max-in-flight together.
const defaultMaxConnections = 4096

// defaultMaxConnectionsPerAddress is an eighth of defaultMaxConnections:
// one client, which may hold idle connections for free, cannot take every
// place; the load harness's sweep (256 connections from loopback) fits.
const defaultMaxConnectionsPerAddress = 512

// minHeaderBytes is the least --max-header-bytes: below it every request
// would get 431, /healthz's included.
const minHeaderBytes = 1024

func addServeFlags(fs *flagSet) serveFlags {
	return serveFlags{
		addr:               fs.String("addr", "127.0.0.1:8080", "`HOST:PORT` to listen on"),
		db:                 addServeDBFlags(fs),
		maxBody:            fs.Int64("max-body-bytes", httpapi.DefaultMaxBodyBytes, "largest request body accepted, in `BYTES`; larger gets 413"),
		maxHeader:          fs.Int64("max-header-bytes", httpapi.DefaultMaxHeaderBytes, "largest request header block accepted, in `BYTES`; larger gets 431"),
		readHeaderTimeout:  fs.Duration("read-header-timeout", 5*time.Second, "time a client has to send the request headers"),
		readTimeout:        fs.Duration("read-timeout", 30*time.Second, "time a client has to send the whole request"),
		writeTimeout:       fs.Duration("write-timeout", 30*time.Second, "time to write the answer, from the end of the headers"),
		idleTimeout:        fs.Duration("idle-timeout", 120*time.Second, "time an idle keep-alive connection stays open"),
		maxConns:           fs.Int64("max-connections", defaultMaxConnections, "client connections open at once, idle keep-alive ones included; more wait in the kernel's queue until one closes (0: no cap)"),
		maxConnsPerAddress: fs.Int64("max-connections-per-address", defaultMaxConnectionsPerAddress, "client connections open at once from one address (an IPv6 address: its /64), but --trusted-proxies'; more are closed at once, unanswered (0: no cap)"),
		requestTimeout:     fs.Duration("request-timeout", httpapi.DefaultRequestTimeout, "time the service may work on one request before answering 503"),
		tlsCert:            fs.String("tls-cert", "", "`FILE` with the TLS certificate chain (PEM): serve HTTPS, TLS 1.2 at least; needs --tls-key"),
		tlsKey:             fs.String("tls-key", "", "`FILE` with the TLS private key (PEM)"),
		publicURL:          fs.String("public-url", "", "`URL` clients reach the API at, behind a proxy or under a path prefix: makes Link headers absolute and names it in the served document's servers"),
		corsOrigins:        fs.String("cors-origins", "", "comma-separated `ORIGINS` (scheme://host[:port]) whose web pages may call the API, or * for any; off when empty. Tokens are never cookies, so no origin gets credentials"),
		shutdownTimeout:    fs.Duration("shutdown-timeout", app.DefaultShutdownTimeout, "time in-flight requests get to finish after SIGTERM, SIGINT or SIGHUP"),
		drainDelay:         fs.OptionalDuration("drain-delay", "time serve goes on serving after SIGTERM, SIGINT or SIGHUP, /readyz answering 503, so that a load balancer takes it out before it stops accepting connections"),
		limits:             addLimitFlags(fs),
		metricsAddr:        fs.String("metrics-addr", "", "`HOST:PORT` to serve Prometheus metrics on (GET /metrics), apart from the API; off when empty"),
		pprofAddr:          fs.String("pprof-addr", "", "`HOST:PORT` to serve Go's profiler (net/http/pprof) on, apart from the API; off when empty. Keep it on loopback"),
		hooks:              addWebhookFlags(fs),
		events:             addEventFlags(fs),
		logFormat:          fs.String("log-format", "json", "log format: json or text"),
		logLevel:           fs.String("log-level", "info", "least severe log level: debug, info, warn or error"),
	}
}

// config is the App's configuration from the flags, or a usage error.
// log is where the service logs; logs, its buffer, takes the access log
// too when the log is JSON at info (the same lines, formatted by httpapi
// itself) and flushes once serve listens.
func (f serveFlags) config(ctx context.Context, log *slog.Logger, logs *bufferedLog) (app.Config, error) {
	cfg := app.Config{
		Store: f.db.storeConfig(),
		API:   httpapi.Config{MaxBodyBytes: *f.maxBody, RequestTimeout: *f.requestTimeout},
		Server: httpapi.ServerLimits{
			ReadHeaderTimeout:        *f.readHeaderTimeout,
			ReadTimeout:              *f.readTimeout,
			WriteTimeout:             *f.writeTimeout,
			IdleTimeout:              *f.idleTimeout,
			MaxHeaderBytes:           int(*f.maxHeader),
			MaxConnections:           int(*f.maxConns),
			MaxConnectionsPerAddress: int(*f.maxConnsPerAddress),
		},
		ShutdownTimeout: *f.shutdownTimeout,
		DrainDelay:      *f.drainDelay,
		MetricsAddr:     *f.metricsAddr,
		PprofAddr:       *f.pprofAddr,
		Logger:          log,
		OnListening:     logs.wake, // scripts wait for the "listening" line
	}
	if strings.EqualFold(*f.logFormat, "json") && log.Enabled(ctx, slog.LevelInfo) {
		cfg.AccessLog = logs
	}
	if err := f.db.check(); err != nil {
		return cfg, err
	}
	// A mistyped address is a usage error, told before the store opens,
	// as other flags' are: not a failure to listen.
	var listeners []listenerAddr
	for _, a := range []listenerAddr{{flag: "--addr", addr: *f.addr}, {flag: "--metrics-addr", addr: *f.metricsAddr}, {flag: "--pprof-addr", addr: *f.pprofAddr}} {
		if a.addr == "" && a.flag != "--addr" {
			continue
		}
		var service string
		var err error
		a.host, service, err = net.SplitHostPort(a.addr)
		if err == nil && service != "" {
			// A number up to 65535, or a service's name (":http").
			a.port, err = net.LookupPort("tcp", service)
		}
		if err != nil || service == "" {
			return cfg, usageError(fmt.Sprintf("%s %q: want HOST:PORT, with a port up to 65535, such as 127.0.0.1:8080 or :8080", a.flag, a.addr))
		}
		listeners = append(listeners, a)
	}
	if err := clashingAddrs(listeners); err != nil {
		return cfg, err
	}
	// No "0 means the default": a limit of 0 could be read as none.
	if *f.maxBody < 1 {
		return cfg, usageError(fmt.Sprintf("--max-body-bytes %d: want 1 or more (the default is %d)", *f.maxBody, httpapi.DefaultMaxBodyBytes))
	}
	if *f.maxHeader < minHeaderBytes {
		return cfg, usageError(fmt.Sprintf("--max-header-bytes %d: want %d or more, as a request's line, Host and Authorization alone take hundreds (the default is %d)",
			*f.maxHeader, minHeaderBytes, httpapi.DefaultMaxHeaderBytes))
	}
	if err := f.limits.apply(&cfg.API); err != nil {
		return cfg, err
	}
	if err := f.events.apply(&cfg); err != nil {
		return cfg, err
	}
	var err error
	if cfg.API.CORSOrigins, err = httpapi.ParseCORSOrigins(*f.corsOrigins); err != nil {
		return cfg, usageError("--cors-origins: " + err.Error())
	}
	if *f.publicURL != "" {
		if cfg.API.PublicURL, err = httpapi.ParsePublicURL(*f.publicURL); err != nil {
			return cfg, usageError("--public-url: " + err.Error())
		}
	}
	switch {
	case (*f.tlsCert == "") != (*f.tlsKey == ""):
		return cfg, usageError("--tls-cert and --tls-key go together")
	case *f.tlsCert != "":
		if cfg.TLS, err = httpapi.TLSConfig(*f.tlsCert, *f.tlsKey, log); err != nil {
			// A file that cannot be read (missing, not this user's to
			// read) fails as a store's file does, exit 1; a pair that
			// makes no certificate (swapped, not PEM, a key of another)
			// is a mistake in the flags.
			if _, unreadable := errors.AsType[*os.PathError](err); unreadable {
				return cfg, err
			}
			return cfg, usageError(err.Error())
		}
	}
	cfg.Webhooks, err = f.hooks.config()
	if err != nil {
		return cfg, err
	}
	// One engine's flag given for the other: said, not silently dropped.
	switch pg := postgres.IsURL(cfg.Store.DB); {
	case pg && cfg.Store.MaxDBBytes > 0:
		log.Warn("--max-db-bytes is for a SQLite store: PostgreSQL ignores it (cap the database's disk on its server)")
	case !pg && cfg.Store.DBMaxConns > 0:
		log.Warn("--db-max-conns is for a PostgreSQL store: SQLite ignores it")
	}
	if f.hooks.given("webhook-max-age") {
		log.Warn("--webhook-max-age is deprecated: it is the earlier name of --webhook-park-after, which to set instead",
			"webhook_park_after", cfg.Webhooks.Schedule.ParkAfter.String())
	}
	if floor := webhook.LeaseFloor(cfg.Webhooks.Timeout); cfg.Webhooks.Lease > 0 && cfg.Webhooks.Lease < floor {
		log.Warn("--webhook-lease raised to 3 times --webhook-timeout: a lease must outlast the attempts made under it",
			"webhook_lease", cfg.Webhooks.Lease.String(), "used", floor.String())
	}
	return cfg, err
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError(fmt.Sprintf("--log-level %q: want debug, info, warn or error", level))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) { // as --log-level, whatever the case
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, usageError(fmt.Sprintf("--log-format %q: want json or text", format))
}

// webhookFlags tune the delivery of events to subscribers.
type webhookFlags struct {
	allowPrivate               *bool
	allowMetadata              *bool
	retrySchedule              *string
	parkAfter, maxAge, timeout *time.Duration
	poll, lease                *time.Duration
	workers, concurrency       *int64
	given                      func(flag string) bool
}

func addWebhookFlags(fs *flagSet) webhookFlags {
	return webhookFlags{
		allowPrivate:  fs.Bool("allow-private-webhooks", false, "let webhooks reach loopback, private and link-local addresses (tests, or subscribers on your own network), but not the cloud metadata endpoints (see --allow-metadata-webhooks); refused by default, checked at connect time"),
		allowMetadata: fs.Bool("allow-metadata-webhooks", false, "let webhooks reach cloud metadata and credential endpoints (169.254.0.0/16, fd00:ec2::/64, 100.100.100.200, 168.63.129.16, 192.0.0.192), which --allow-private-webhooks does not open"),
		retrySchedule: fs.String("webhook-retry-schedule", "5s,30s,2m,10m,1h", "waits between a webhook delivery's failed attempts; the last repeats"),
		parkAfter:     fs.Duration("webhook-park-after", webhook.DefaultSchedule.ParkAfter, "how long a webhook delivery is retried, from its first failed attempt, before it is parked and its plant's later events go on (webhook list shows parked deliveries, webhook retry sends them again)"),
		maxAge:        fs.Duration("webhook-max-age", 0, "deprecated: the earlier name of --webhook-park-after, used in its place when set"),
		timeout:       fs.Duration("webhook-timeout", 10*time.Second, "time one webhook attempt may take, connection to answer"),
		poll:          fs.Duration("webhook-poll", time.Second, "how often to look for due webhook deliveries when no create of this process signals one (bounds how soon instances send what others enqueued), and, on PostgreSQL, how often event streams look for other instances' events in any case (NOTIFY tells them sooner)"),
		lease:         fs.Duration("webhook-lease", 30*time.Second, "how long a subscriber stays with one instance without renewal; a crashed instance's subscribers are taken over after it (a value under 3x --webhook-timeout is raised to that, with a warning)"),
		workers:       fs.Int64("webhook-workers", 16, "subscribers served at once; a slow one holds one worker, never the others, and past this many they take turns"),
		concurrency:   fs.Int64("webhook-concurrency", webhook.DefaultConcurrency, "webhook attempts in flight to one subscriber; one plant's events still go one after another, in order"),
		given:         fs.given,
	}
}

func (f webhookFlags) config() (app.WebhookConfig, error) {
	intervals, err := webhook.ParseIntervals(*f.retrySchedule)
	if err != nil {
		return app.WebhookConfig{}, usageError("--webhook-retry-schedule: " + err.Error())
	}
	if *f.workers < 1 || *f.workers > 1024 {
		return app.WebhookConfig{}, usageError("--webhook-workers must be between 1 and 1024")
	}
	if *f.concurrency < 1 || *f.concurrency > 1024 {
		return app.WebhookConfig{}, usageError("--webhook-concurrency must be between 1 and 1024")
	}
	parkAfter := *f.parkAfter
	if f.given("webhook-max-age") {
		if f.given("webhook-park-after") && *f.maxAge != *f.parkAfter {
			return app.WebhookConfig{}, usageError("--webhook-max-age is the earlier name of --webhook-park-after, and both are set to different times: set --webhook-park-after alone")
		}
		parkAfter = *f.maxAge
	}
	if parkAfter <= 0 {
		return app.WebhookConfig{}, usageError("--webhook-park-after must be positive")
	}
	return app.WebhookConfig{
		AllowPrivate:  *f.allowPrivate,
		AllowMetadata: *f.allowMetadata,
		Schedule:      webhook.Schedule{Intervals: intervals, ParkAfter: parkAfter},
		Timeout:       *f.timeout,
		Poll:          *f.poll,
		Lease:         *f.lease,
		Workers:       int(*f.workers),
		Concurrency:   int(*f.concurrency),
	}, nil
}

// limitFlags are the request limits: a cap on requests in flight, a rate
// per token, and a throttle on failed authentication per address.
type limitFlags struct {
	maxInFlight, perToken, rate, burst *int64
	authFailures                       *int64
	authFailureWindow, bodyTimeout     *time.Duration
	addressRate                        *int64
	proxies                            *string
}

func addLimitFlags(fs *flagSet) limitFlags {
	return limitFlags{
		maxInFlight:       fs.Int64("max-in-flight", 1024, "plant operations served at once; more get 503 at once (0: no cap)"),
		perToken:          fs.Int64("max-in-flight-per-token", 0, "plant operations of one token served at once; more get 429 (0: a quarter of --max-in-flight)"),
		bodyTimeout:       fs.Duration("body-read-timeout", httpapi.DefaultBodyReadTimeout, "time a client has to send a request body once its headers are in (at most --read-timeout less --read-header-timeout); then 408"),
		rate:              fs.Int64("rate-limit", 0, "requests per second each token may make; more get 429 (0: no limit)"),
		burst:             fs.Int64("rate-burst", 0, "requests a token may make at once within --rate-limit (0: twice the rate)"),
		authFailures:      fs.Int64("auth-failure-limit", 10, "refused tokens one client address may send per --auth-failure-window; beyond, its requests with tokens this server does not know to be valid (found valid before, or on the roster of active tokens) get 429, unchecked, until it has an attempt again; requests without a token are still served (0: no limit)"),
		authFailureWindow: fs.Duration("auth-failure-window", httpapi.DefaultAuthFailureWindow, "the window of --auth-failure-limit; an address regains one attempt every window/limit"),
		addressRate:       fs.Int64("address-rate", 20, "requests per second one client address may make to /readyz, /, /docs and the documents, in bursts of twice that; more get 429 (0: no limit; /healthz is never limited)"),
		proxies:           fs.String("trusted-proxies", "", "comma-separated `CIDRs` of proxies whose X-Forwarded-For names the client address (for --auth-failure-limit and --address-rate), and whose X-Forwarded-Proto and -Host, or Forwarded, the URL the client used (for Link and the OpenAPI servers); ignored from any other peer"),
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
	cfg.MaxInFlightPerToken = int(*f.perToken)
	cfg.BodyReadTimeout = *f.bodyTimeout
	cfg.AddressRate = float64(*f.addressRate)
	cfg.TokenRate = float64(*f.rate)
	cfg.TokenBurst = int(*f.burst)
	cfg.AuthFailures = int(*f.authFailures)
	cfg.AuthFailureWindow = *f.authFailureWindow
	return nil
}

// fitProcsToQuota runs serve on one P (GOMAXPROCS 1) when a cgroup quota
// lets the process use at most one CPU's time, as Kubernetes'
// limits.cpu: 1 does. Go's own default there is 2: it rounds a quota up,
// to at least 2. With one CPU's time, two Ps spend it handing goroutines
// and wake-ups between them: on this project's machine, under a quota of
// one CPU, a create cost 32–35 µs of CPU at GOMAXPROCS 2 against 25–28
// at 1, a page of 100 43–54 against 33, and every p99 fell
// (BENCHMARKS.md "Design 7"). A GOMAXPROCS set in the environment is
// left as it is. The quota is read once, at start: after a change to
// it, restart the server.
func fitProcsToQuota(getenv func(string) string, log *slog.Logger) {
	if getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) == 1 {
		return
	}
	cpus, limited, err := cpulimit.Quota()
	if err != nil {
		log.Warn("cannot read the cgroup CPU quota; GOMAXPROCS stays as Go chose it", "gomaxprocs", runtime.GOMAXPROCS(0), "err", err)
		return
	}
	if limited && cpus <= 1 {
		runtime.GOMAXPROCS(1)
		log.Info("one P for a CPU quota of one CPU or less (GOMAXPROCS sets another)", "cpus", cpus, "gomaxprocs", 1)
	}
}

// listenAll binds the API's address and the side listeners' that cfg
// asks for, handing the side ones to cfg; on a failure it closes what it
// bound and says which address failed.
func listenAll(cfg *app.Config, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	for _, side := range []struct {
		flag, addr string
		ln         *net.Listener
	}{
		{"--metrics-addr", cfg.MetricsAddr, &cfg.MetricsListener},
		{"--pprof-addr", cfg.PprofAddr, &cfg.PprofListener},
	} {
		if side.addr == "" {
			continue
		}
		if *side.ln, err = net.Listen("tcp", side.addr); err != nil {
			closeListeners(ln, cfg.MetricsListener, cfg.PprofListener)
			cfg.MetricsListener, cfg.PprofListener = nil, nil
			return nil, fmt.Errorf("%s: listen: %w", side.flag, err)
		}
	}
	return ln, nil
}

// listenerAddr is a listening address given on the command line, and
// its host and port once checked.
type listenerAddr struct {
	flag, addr, host string
	port             int
}

// clashingAddrs refuses two listeners given one port on hosts that
// overlap (the same, or one of them every address): a mistake in the
// command line, not a port some other process holds, which listening
// would report. Port 0, a free port each, never clashes.
func clashingAddrs(listeners []listenerAddr) error {
	for i, a := range listeners {
		for _, other := range listeners[:i] {
			if a.port != 0 && a.port == other.port && (a.host == other.host || anyHost(a.host) || anyHost(other.host)) {
				return usageError(fmt.Sprintf("%s %s and %s %s: one port for two listeners; give each a port of its own", other.flag, other.addr, a.flag, a.addr))
			}
		}
	}
	return nil
}

// anyHost reports whether a listener's host is every address of the machine.
func anyHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}

// closeListeners closes those of ls that are bound.
func closeListeners(ls ...net.Listener) {
	for _, l := range ls {
		if l != nil {
			l.Close()
		}
	}
}
