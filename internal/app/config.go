package app

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/httpapi"
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
	// DrainDelay, when set, is how long Serve goes on serving once its
	// context ends, with /readyz answering 503, before it stops accepting
	// connections: time for a load balancer's health checks to take the
	// instance out, so that no request is sent on a connection it closes.
	DrainDelay time.Duration
	// MetricsAddr and PprofAddr, when set, are where Prometheus metrics
	// and Go's profiler are served, each on a listener of its own, never
	// on the API's.
	MetricsAddr, PprofAddr string
	// MetricsListener and PprofListener, when set, are listeners already
	// bound at MetricsAddr and PprofAddr, which Serve uses instead of
	// binding them itself (serve binds every address before it opens the
	// store, so an address that cannot be used makes no store). Serve
	// closes them.
	MetricsListener, PprofListener net.Listener
	Webhooks                       WebhookConfig
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
	// TokenRosterInterval is how often the hashes of the active tokens are
	// read for the failed-authentication throttle
	// (auth.Options.RosterInterval); 0 for its default.
	TokenRosterInterval time.Duration
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
