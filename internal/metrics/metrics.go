// Package metrics exposes what plantstore does as Prometheus metrics, on a
// listener of its own (serve --metrics-addr), never on the API's port. It
// holds every collector in its own registry, and adapts to the other
// packages through small hooks (an HTTP observer, a store wrapper,
// functions that read counters), so none of them imports Prometheus.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/plantstore/plantstore"
)

const namespace = "plantstore"

// Metrics is the registry and the collectors the service updates.
type Metrics struct {
	registry *prometheus.Registry

	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	inFlight        prometheus.Gauge
	storeDuration   *prometheus.HistogramVec
	batchSize       prometheus.Histogram

	// The vectors' children by their labels, resolved once:
	// WithLabelValues hashes the values and takes the vector's lock on
	// every call, a few hundred nanoseconds a request. The labels are
	// few (route patterns, known methods, the statuses answered;
	// operations and outcomes), so the caches stay small.
	requestChildren sync.Map // requestLabels → *requestChild
	storeChildren   sync.Map // storeLabels → prometheus.Observer
}

type requestLabels struct {
	route, method string
	status        int
}

type requestChild struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

type storeLabels struct{ op, outcome string }

// New makes the registry, with Go's runtime and the process's metrics.
func New() *Metrics {
	m := &Metrics{registry: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "http", Name: "requests_total",
		Help: "HTTP requests answered, by route pattern (never the raw path), method and status.",
	}, []string{"route", "method", "status"})
	m.requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "http", Name: "request_duration_seconds",
		Help:    "Time from reading a request's headers to the end of its answer, by route pattern and method.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
	}, []string{"route", "method"})
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "http", Name: "requests_in_flight",
		Help: "Requests being served now.",
	})
	m.storeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "store", Name: "operation_duration_seconds",
		Help:    "Time of each store operation, by operation and outcome (ok, or the error code).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"operation", "outcome"})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "store", Name: "group_commit_batch_size",
		Help:    "Plant writes committed together by each group commit: on SQLite a transaction of creates, updates and deletes; on PostgreSQL a batch statement of creates.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
	})
	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.requestDuration, m.inFlight, m.storeDuration, m.batchSize,
	)
	return m
}

// Handler serves the registry in Prometheus's text format. A collector
// that fails (the outbox's counts, read from a database that is down)
// leaves out its own series only: promhttp's default answers the whole
// scrape 500, and an outage would blank the very series that show it.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// RequestStarted and RequestDone implement the HTTP transport's observer.
func (m *Metrics) RequestStarted() { m.inFlight.Inc() }

// RequestDone records one answered request. route is the pattern that
// matched ("POST /plants", "GET /plants/{id}"), or "" for none, which is
// counted as "unmatched": a raw path would let any client grow the series
// without bound.
func (m *Metrics) RequestDone(route, method string, status int, took time.Duration) {
	m.inFlight.Dec()
	if route == "" {
		route = "unmatched"
	}
	method = knownMethod(method)
	child := resolved(&m.requestChildren, requestLabels{route, method, status}, func() *requestChild {
		return &requestChild{
			count:    m.requests.WithLabelValues(route, method, strconv.Itoa(status)),
			duration: m.requestDuration.WithLabelValues(route, method),
		}
	})
	child.count.Inc()
	child.duration.Observe(took.Seconds())
}

// resolved returns the child cached under labels in children, resolving
// it with resolve the first time.
func resolved[L comparable, C any](children *sync.Map, labels L, resolve func() C) C {
	c, ok := children.Load(labels)
	if !ok {
		c, _ = children.LoadOrStore(labels, resolve())
	}
	return c.(C)
}

// knownMethod keeps the method label's values few: an unknown method is
// "other".
func knownMethod(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodPatch, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// ObserveBatch records a group commit's size (sqlite.Options.ObserveBatch,
// postgres.Options.ObserveBatch).
func (m *Metrics) ObserveBatch(writes int) { m.batchSize.Observe(float64(writes)) }

// TokenCache registers the authenticator's cache counts, read at each
// scrape.
func (m *Metrics) TokenCache(stats func() (hits, misses int64)) {
	m.registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "auth", Name: "token_cache_hits_total",
			Help: "Token checks answered from memory.",
		}, func() float64 { h, _ := stats(); return float64(h) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "auth", Name: "token_cache_misses_total",
			Help: "Token checks that asked the store.",
		}, func() float64 { _, mi := stats(); return float64(mi) }),
	)
}

// Connections registers the API listener's connections (the lean server's
// and net/http's together; the metrics listener's are not among them),
// read at each scrape: those open now, the cap (--max-connections, 0 for
// none), and the times the cap was reached and accepting stopped.
func (m *Metrics) Connections(max int, stats func() ConnStats) {
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "http", Name: "connections_open",
			Help: "Client connections to the API open now, idle keep-alive ones and TLS handshakes included.",
		}, func() float64 { return float64(stats().Open) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "http", Name: "connections_max",
			Help: "The cap on connections_open (--max-connections); 0: no cap.",
		}, func() float64 { return float64(max) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "http", Name: "connection_limit_waits_total",
			Help: "Times the connections open reached --max-connections and the server stopped accepting until one closed; new clients wait in the kernel's queue meanwhile.",
		}, func() float64 { return float64(stats().Waits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "http", Name: "connections_refused_total",
			Help: "Connections closed at once, unanswered, their client address having --max-connections-per-address open already.",
		}, func() float64 { return float64(stats().Refused) }),
	)
}

// TLSCertificate registers the end of the validity of the TLS certificate
// in service (its NotAfter, as a Unix time), read at each scrape: a
// renewal that failed shows here, before clients refuse the certificate.
func (m *Metrics) TLSCertificate(notAfter func() time.Time) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "tls", Name: "certificate_expiry_timestamp_seconds",
		Help: "When the TLS certificate in service expires (its NotAfter), in seconds since the Unix epoch; renewed files are read within a second.",
	}, func() float64 {
		t := notAfter()
		if t.IsZero() {
			return 0 // unknown: as good as expired
		}
		return float64(t.Unix())
	}))
}

// ConnStats are the API listener's connection counts, read at each
// scrape.
type ConnStats struct {
	Open, Waits, Refused int64
}

// WebhookStats are a dispatcher's counters since it started.
type WebhookStats struct {
	Attempts, Delivered, Retried, Failed, Disabled, Paused int64
}

// Webhooks registers the webhook counters: this process's attempts, read
// from the dispatcher, and the outbox's pending, delivered and failed
// deliveries (across all instances), read from the store at each scrape.
func (m *Metrics) Webhooks(dispatcher func() WebhookStats, store plantstore.WebhookStore) {
	counter := func(name, help string, read func(WebhookStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "webhook", Name: name, Help: help,
		}, func() float64 { return float64(read(dispatcher())) })
	}
	m.registry.MustRegister(
		counter("attempts_total", "Delivery attempts made by this process.", func(s WebhookStats) int64 { return s.Attempts }),
		counter("delivered_total", "Attempts answered 2xx.", func(s WebhookStats) int64 { return s.Delivered }),
		counter("retried_total", "Failed attempts scheduled to be tried again.", func(s WebhookStats) int64 { return s.Retried }),
		counter("failed_total", "Deliveries parked after failing for --webhook-park-after (webhook retry sends them again).", func(s WebhookStats) int64 { return s.Failed }),
		counter("subscribers_disabled_total", "Subscribers disabled because they answered 410 Gone.", func(s WebhookStats) int64 { return s.Disabled }),
		counter("receiver_down_total", "Times a subscriber's receiver was found down, or still down at a probe, and its deliveries were paused until the next probe.", func(s WebhookStats) int64 { return s.Paused }),
		&outboxCollector{store: store, desc: prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "webhook", "deliveries"),
			"Deliveries in the store's outbox by state (pending, delivered, failed), all instances together.",
			[]string{"state"}, nil)},
	)
}

// outboxCollector reads the outbox's counts once per scrape.
type outboxCollector struct {
	store plantstore.WebhookStore
	desc  *prometheus.Desc
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.store.CountDeliveries(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for state, n := range map[string]int64{"pending": counts.Pending, "delivered": counts.Delivered, "failed": counts.Failed} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), state)
	}
}
