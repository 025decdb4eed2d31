// Package httpapi is the HTTP transport of the Plant Store API: routing,
// authentication, decoding and encoding, and the mapping of errors to
// statuses. It depends on the domain package only; storage engines are
// given to it as interfaces.
package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/api"
	"github.com/plantstore/plantstore/internal/accept"
	"github.com/plantstore/plantstore/internal/docs"
)

// Config holds the transport's limits. Zero values take the defaults; the
// request limits (MaxInFlight, TokenRate, AuthFailures) are off when zero.
type Config struct {
	// MaxBodyBytes caps a request body; larger ones get 413. Default 64 KiB.
	MaxBodyBytes int64
	// RequestTimeout bounds the work of one request once it has been read;
	// past it the request gets 503. Default 10 s.
	RequestTimeout time.Duration
	// MaxInFlight caps the plant operations being served at once; beyond
	// it a request gets 503 at once. MaxInFlightPerToken caps those of one
	// token (default a quarter of MaxInFlight, at least 1), so that no
	// token, slow bodies and all, can hold every slot; beyond it, 429.
	// Both are taken after authentication, so a client without a valid
	// token holds none.
	MaxInFlight         int
	MaxInFlightPerToken int
	// BodyReadTimeout bounds the time to read a request body once its
	// headers are in; past it, 408. Default 5 s: the largest body allowed
	// needs far less on any working connection, and a slow one holds its
	// slot only that long.
	BodyReadTimeout time.Duration
	// TokenRate is the requests per second each token may make, in bursts
	// of up to TokenBurst (default twice the rate, at least 1); beyond it,
	// 429.
	TokenRate  float64
	TokenBurst int
	// AuthFailures is how many refused tokens one client address may send
	// per AuthFailureWindow (default 1 minute), all at once if it likes;
	// beyond that, the address's requests with tokens this process has
	// not found valid before get 429, unchecked (see requireScope).
	AuthFailures      int
	AuthFailureWindow time.Duration
	// AddressRate is the requests per second one client address may make
	// to the unauthenticated routes that cost something (/readyz, which
	// asks the store, the documents, the reference page and its script),
	// in bursts of twice that; beyond it, 429. /healthz is never limited.
	AddressRate float64
	// TrustedProxies are the proxies whose X-Forwarded-For names the client
	// address for AuthFailures; from any other peer the header is ignored.
	TrustedProxies []netip.Prefix
	Logger         *slog.Logger
	// AccessLog, when set, receives the access log instead of Logger: one
	// JSON line per request, as Logger's JSON handler would write it,
	// formatted without slog's general machinery (see logRequest). It
	// must be safe for concurrent use; each line is one Write.
	AccessLog io.Writer
	// Observer, when set, is told of every request, for metrics.
	Observer Observer
	// TLS says the service is served over TLS by itself: every answer then
	// carries Strict-Transport-Security.
	TLS bool
	// CORSOrigins are the origins whose web pages may call the API (see
	// cors.go): "*" alone for any, or exact origins; none when empty.
	// Checked by ParseCORSOrigins.
	CORSOrigins []string
	// MaxHeaderBytes caps the request line and header fields, counted as
	// sent ("Name: value" and CRLF each); larger gets 431. Go's server
	// reads up to 4 KiB beyond its own MaxHeaderBytes (8 KiB on a reused
	// connection), so the exact limit is kept here. 0: Go's alone.
	MaxHeaderBytes int
	// EventsWritten wakes the event streams' reader (feed.go) when the
	// store has recorded events; EventPoll is how often it looks anyway
	// (default 1 s), for writes no signal reported.
	EventsWritten <-chan struct{}
	EventPoll     time.Duration
	// MaxStreams caps the event streams open at once (beyond it, 503),
	// MaxStreamsPerToken those of one token (beyond it, 429). Defaults
	// DefaultMaxStreams and DefaultMaxStreamsPerToken.
	MaxStreams, MaxStreamsPerToken int
	// StreamKeepAlive is how often an idle stream sends a comment, so
	// that proxies keep it open and a dead client is found. Default 15 s.
	StreamKeepAlive time.Duration
	// PublicURL is the base URL clients reach the API at, when a proxy or
	// a path prefix stands between them ("https://api.example.com/store").
	// When set, Link headers are absolute URLs under it and the served
	// document's servers name it; when empty, Link headers are relative to
	// the request and the document keeps its {base_url} variable. Checked
	// by ParsePublicURL.
	PublicURL string
}

// ParsePublicURL checks a public base URL: absolute http or https, with a
// host, and no query, fragment or credentials. It returns it without a
// trailing slash.
func ParsePublicURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an absolute http or https URL", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("%q: a public URL has no query, fragment or credentials", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// Observer watches requests: RequestStarted when one arrives, RequestDone
// when it has been answered, with the route pattern that matched it ("" for
// none), never the raw path.
type Observer interface {
	RequestStarted()
	RequestDone(route, method string, status int, took time.Duration)
}

// Defaults of Config.
const (
	DefaultMaxBodyBytes      = 64 << 10
	DefaultMaxHeaderBytes    = 16 << 10
	DefaultRequestTimeout    = 10 * time.Second
	DefaultBodyReadTimeout   = 5 * time.Second
	DefaultAuthFailureWindow = time.Minute
)

// Authenticator turns a bearer token into the token record it stands for,
// or fails with EUNAUTHORIZED (or the store's EUNAVAILABLE). A request
// hashes its token once, with Hash, and asks the rest by that hash.
// Known reports, without asking the store, whether the token was found
// valid before: such a token's lookup is let through while its client's
// address is throttled.
type Authenticator interface {
	Hash(secret string) plantstore.TokenHash
	// Cached is Lookup without asking the store: false when only the
	// store could tell.
	Cached(hash plantstore.TokenHash) (plantstore.Token, bool)
	Known(hash plantstore.TokenHash) bool
	// RosterDue is how long after now the tokens valid now are all Known.
	RosterDue(now time.Time) time.Duration
	Lookup(ctx context.Context, hash plantstore.TokenHash) (plantstore.Token, error)
}

// Store is what the handlers need of a storage engine.
type Store interface {
	plantstore.PlantStore
	plantstore.EventStore
	Ping(ctx context.Context) error
}

// Server answers the Plant Store API.
type Server struct {
	store   Store
	auth    Authenticator
	log     *slog.Logger
	cfg     Config
	handler http.Handler

	deadlines    *deadlines
	serving      atomic.Int64 // plant operations in flight, for Busy
	servedAt     atomic.Int64 // when the last ended, in Unix nanoseconds
	inFlight     atomic.Int64
	perToken     *tokenSlots               // in flight by token; nil when off
	tokenRate    *tokenBuckets[int64]      // by token ID; nil when off
	authFailures *tokenBuckets[netip.Addr] // by clientAddr; nil when off
	lookups      lookupGate                // the token lookups in flight, by clientAddr
	addressRate  *tokenBuckets[netip.Addr] // by clientAddr; nil when off

	feed            *feed
	streams         atomic.Int64 // event streams open
	streamsPerToken *tokenSlots

	// repeated holds back the copies of an outage's error line, by status.
	repeated map[int]*repeatedErrors

	draining atomic.Bool // Drain was called: /readyz answers 503
}

// Drain makes /readyz answer 503 from now on, while every other route
// is served as before: the start of a graceful shutdown, which a load
// balancer's health checks see before the listener closes.
func (s *Server) Drain() { s.draining.Store(true) }

// NewServer returns the API's handler over store, checking tokens with
// authn.
func NewServer(store Store, authn Authenticator, cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.BodyReadTimeout <= 0 {
		cfg.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if cfg.MaxInFlight > 0 && cfg.MaxInFlightPerToken <= 0 {
		cfg.MaxInFlightPerToken = max(1, cfg.MaxInFlight/4)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.EventPoll <= 0 {
		cfg.EventPoll = DefaultEventPoll
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxStreamsPerToken <= 0 {
		cfg.MaxStreamsPerToken = DefaultMaxStreamsPerToken
	}
	if cfg.StreamKeepAlive <= 0 {
		cfg.StreamKeepAlive = DefaultStreamKeepAlive
	}
	s := &Server{store: store, auth: authn, log: cfg.Logger, cfg: cfg, deadlines: newDeadlines(cfg.RequestTimeout),
		repeated: map[int]*repeatedErrors{http.StatusServiceUnavailable: newRepeatedErrors(cfg.Logger), http.StatusInsufficientStorage: newRepeatedErrors(cfg.Logger)}}
	if cfg.TokenRate > 0 {
		burst := cfg.TokenBurst
		if burst <= 0 {
			burst = max(1, int(2*cfg.TokenRate))
		}
		s.tokenRate = newTokenBuckets[int64](cfg.TokenRate, burst, maxBucketKeys)
	}
	if cfg.AuthFailures > 0 {
		if cfg.AuthFailureWindow <= 0 {
			s.cfg.AuthFailureWindow = DefaultAuthFailureWindow
		}
		rate := float64(cfg.AuthFailures) / s.cfg.AuthFailureWindow.Seconds()
		s.authFailures = newTokenBuckets[netip.Addr](rate, cfg.AuthFailures, maxBucketKeys)
	}
	if cfg.AddressRate > 0 {
		s.addressRate = newTokenBuckets[netip.Addr](cfg.AddressRate, max(1, int(2*cfg.AddressRate)), maxBucketKeys)
	}
	s.feed = newFeed(store, cfg.EventsWritten, cfg.EventPoll, cfg.RequestTimeout, cfg.Logger)
	s.streamsPerToken = &tokenSlots{max: cfg.MaxStreamsPerToken, held: map[int64]int{}}
	if cfg.MaxInFlightPerToken > 0 {
		s.perToken = &tokenSlots{max: cfg.MaxInFlightPerToken, held: map[int64]int{}}
	}
	mux := http.NewServeMux()
	s.routes(mux)
	s.handler = s.observe(s.recoverPanics(canonicalPathRedirect(mux)))
	return s
}

// canonicalPathRedirect answers 307 to the canonical path when the path
// as sent is not in canonical form: an empty segment ("//plants"), a dot
// segment ("/./plants", "/plants/.."), written plainly or escaped ("/%2e/plants":
// RFC 3986, section 6.2.2.2, "%2e" is "."). The mux would answer the
// plain forms itself, but it builds its Location by escaping the path
// again, so "//plants/%31" went to "/plants/%2531", another resource; and
// it cleans the path as sent, where "%2e" is no dot, then matches the
// decoded "." or ".." against the routes and answers 404. Here the
// Location keeps the path's escapes as they came, a trailing slash and
// the query. A path sent without escaped bytes the decoded one hides
// (no RawPath) that holds neither "//" nor "/.", nearly every path, costs
// two searches and no escaping.
func canonicalPathRedirect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if !strings.HasPrefix(p, "/") || r.URL.RawPath == "" && !strings.Contains(p, "//") && !strings.Contains(p, "/.") {
			next.ServeHTTP(w, r)
			return
		}
		escaped := r.URL.EscapedPath()
		segments := strings.Split(escaped, "/")
		for i, seg := range segments {
			switch strings.ToLower(seg) {
			case "%2e":
				segments[i] = "."
			case "%2e%2e", ".%2e", "%2e.":
				segments[i] = ".."
			}
		}
		canonical := path.Clean(strings.Join(segments, "/"))
		if strings.HasSuffix(escaped, "/") && canonical != "/" {
			canonical += "/"
		}
		if canonical == escaped {
			next.ServeHTTP(w, r)
			return
		}
		if r.URL.RawQuery != "" {
			canonical += "?" + r.URL.RawQuery
		}
		// http.Redirect cleans a path, as path.Clean did, and escapes
		// nothing.
		http.Redirect(w, r, canonical, http.StatusTemporaryRedirect)
	})
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// routes is the whole API on one screen. Patterns for GET also answer HEAD.
// Anything else gets 404, or 405 with Allow, from the mux, turned into the
// Error body by observe.
func (s *Server) routes(mux *http.ServeMux) {
	read, write := plantstore.ScopePlantsRead, plantstore.ScopePlantsWrite
	// A plant operation needs a token (which the failed-authentication
	// throttle and the token's rate limit guard; see requireScope), then a
	// slot in flight, of its token's and of the service's.
	plants := func(scope string, h http.Handler) http.Handler {
		return s.countServing(s.requireScope(scope, s.limitInFlight(h)))
	}
	// The unauthenticated routes that cost something are limited per
	// address; /healthz never is: a liveness probe failing under load
	// would restart a healthy process.
	public := s.limitAddress
	handle := func(pattern string, h http.Handler) { mux.Handle(pattern, withRoute(pattern, h)) }
	handle("GET /plants", varyEncoding(plants(read, s.handleListPlants())))
	handle("POST /plants", plants(write, s.handleCreatePlant()))
	handle("GET /plants/{id}", varyEncoding(plants(read, s.handleGetPlant())))
	handle("PUT /plants/{id}", plants(write, s.handleUpdatePlant()))
	handle("DELETE /plants/{id}", plants(write, s.handleDeletePlant()))
	// A page of events is like a plant operation; a stream holds a stream
	// slot instead of one in flight (handleEvents).
	handle("GET /events", varyEncoding(s.queryToken(s.requireScope(read, s.handleEvents()))))

	handle("GET /healthz", s.handleHealth())
	handle("GET /readyz", public(s.handleReady()))
	handle("GET /openapi.json", public(s.serveDocument("application/json", api.JSON, withServer)))
	handle("GET /openapi.yaml", public(s.serveDocument("application/yaml", api.YAML, withServerYAML)))
	handle("GET /docs", public(docs.Page("Plant Store API reference")))
	handle("GET /docs/{$}", s.redirectToDocs())
	handle("GET "+docs.BundlePath, public(docs.Bundle()))
	handle("GET /{$}", public(s.handleRoot()))
}

// FastRoute says which requests the lean HTTP/1.1 server (internal/http1)
// may answer with this handler instead of net/http: the plant operations,
// whose answers are short and whole. HEAD, OPTIONS, the event stream, the
// documents and the probes stay with net/http.
func FastRoute(method, path string) bool {
	switch method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete:
	default:
		return false
	}
	if path == "/plants" {
		return true
	}
	id, ok := strings.CutPrefix(path, "/plants/")
	return ok && id != "" && !strings.ContainsAny(id, "/.")
}

// withRoute notes the pattern that matched, for metrics: the mux sets it
// on its own copy of the request, which the outer layers never see.
func withRoute(pattern string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		infoFrom(r.Context()).route = pattern
		h.ServeHTTP(w, r)
	})
}

// rootBody is what GET / answers a program: where the API is described.
type rootBody struct {
	Name    string `json:"name"`
	Docs    string `json:"docs"`
	OpenAPI string `json:"openapi"`
}

// handleRoot answers GET /, which a person trying the service opens
// first: a pointer to the reference page and the document, as JSON, or
// as a small page for a browser. The API itself is under /plants.
func (s *Server) handleRoot() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept")
		if prefersHTML(r.Header.Get("Accept")) {
			docs.Index("Plant Store API", s.baseURL(r)).ServeHTTP(w, r)
			return
		}
		base := s.baseURL(r) + "/"
		if base == "/" {
			base = "" // no usable host: relative to the request
		}
		writeJSON(w, http.StatusOK, rootBody{Name: "Plant Store API", Docs: base + "docs", OpenAPI: base + "openapi.json"})
	})
}

// prefersHTML says whether an Accept header ranks HTML above JSON, as a
// browser's does (text/html, then */* at a lower quality): by quality,
// each judged by the most specific range that names it, and on a tie by
// the one listed first. curl's */* gets JSON, and so does a header that
// gives text/html q=0.
func prefersHTML(header string) bool {
	html, json := acceptRank{}, acceptRank{}
	i := 0
	for part := range strings.SplitSeq(header, ",") {
		media, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		media = strings.ToLower(strings.TrimSpace(media))
		q, _ := accept.Quality(params) // 0 when malformed
		switch media {
		case "text/html", "application/xhtml+xml":
			html.consider(3, q, i)
		case "text/*":
			html.consider(2, q, i)
		case "application/json":
			json.consider(3, q, i)
		case "application/*":
			json.consider(2, q, i)
		case "*/*":
			html.consider(1, q, i)
			json.consider(1, q, i)
		}
		i++
	}
	switch {
	case html.q <= 0:
		return false
	case html.q != json.q:
		return html.q > json.q
	}
	return html.at < json.at
}

// acceptRank is how an Accept header ranks one kind of answer: the
// quality of the most specific range that matches it (RFC 9110, section
// 12.5.1), and that range's place in the header.
type acceptRank struct {
	specific int // 0: no range matched
	q        float64
	at       int
}

func (r *acceptRank) consider(specific int, q float64, at int) {
	if specific > r.specific {
		*r = acceptRank{specific: specific, q: q, at: at}
	}
}

// redirectToDocs sends /docs/ to /docs, where the page's relative links
// (openapi.json, its script) resolve; the query goes along, as with the
// other redirects to a canonical path.
func (s *Server) redirectToDocs() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := "../docs"
		if base := s.baseURL(r); base != "" {
			target = base + "/docs"
		}
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, target, http.StatusMovedPermanently)
	})
}

type statusBody struct {
	Status string `json:"status"`
}

// handleHealth says the process is up; it touches nothing else.
// Liveness answers /healthz as the API does, for a listener of the
// process's own (the metrics'): a probe's request there is no API
// traffic, so it is neither counted nor logged.
func (s *Server) Liveness() http.Handler { return s.handleHealth() }

func (s *Server) handleHealth() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, statusBody{Status: "ok"})
	})
}

// handleReady says whether the store answers, within a second.
func (s *Server) handleReady() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			s.writeError(w, r, &httpError{status: http.StatusServiceUnavailable, message: "the server is shutting down", planned: true})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := s.store.Ping(ctx); err != nil {
			if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
				err = plantstore.WrapError(plantstore.EUNAVAILABLE, "the store is not answering", err)
			}
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, statusBody{Status: "ready"})
	})
}

// withServer returns the JSON document with its servers replaced by the
// public URL, so clients generated from it, and the reference page's
// examples, point at this deployment.
func withServer(doc []byte, publicURL string) []byte {
	var m map[string]jsontext.Value
	if err := json.Unmarshal(doc, &m); err != nil {
		panic(err) // the embedded document is valid JSON (api's tests)
	}
	servers, err := json.Marshal([]map[string]string{{"url": publicURL, "description": "This deployment."}})
	if err != nil {
		panic(err)
	}
	m["servers"] = servers
	out, err := json.Marshal(m, json.Deterministic(true))
	if err != nil {
		panic(err)
	}
	return out
}

// withServerYAML does the same to the YAML document, whose top-level
// servers block is replaced as text: up to the next top-level key.
func withServerYAML(doc []byte, publicURL string) []byte {
	start := bytes.Index(doc, []byte("\nservers:\n"))
	if start < 0 {
		panic("openapi.yaml has no top-level servers") // checked by the tests
	}
	start++
	end := start + len("servers:\n")
	for end < len(doc) {
		next := bytes.IndexByte(doc[end:], '\n')
		if next < 0 {
			end = len(doc)
			break
		}
		if doc[end] != ' ' && doc[end] != '\n' && doc[end] != '#' {
			break
		}
		end += next + 1
	}
	quoted, _ := json.Marshal(publicURL) // a JSON string is a YAML string
	block := fmt.Appendf(nil, "servers:\n  - url: %s\n    description: This deployment.\n", quoted)
	return slices.Concat(doc[:start], block, doc[end:])
}

// serveDocument serves the OpenAPI document doc, its servers naming
// where the client reached it (baseURL), so generated clients and the
// reference page's examples point at this deployment; gzipped to a client
// that takes it. Each variant is made once per base URL and kept, up to
// maxDocumentVariants of them.
func (s *Server) serveDocument(contentType string, doc []byte, withBase func([]byte, string) []byte) http.Handler {
	var mu sync.Mutex
	variants := map[string]*documentVariant{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base := s.baseURL(r)
		mu.Lock()
		v, ok := variants[base]
		mu.Unlock()
		if !ok {
			v = newDocumentVariant(doc, base, withBase)
			mu.Lock()
			if len(variants) < maxDocumentVariants {
				variants[base] = v
			}
			mu.Unlock()
		}
		// Conditional requests as for a plant (RFC 9110, section 13): a
		// strong tag of the variant's bytes, its gzipped copy's ending in
		// -gz.
		unchanged, err := readConditions(r, v.etag)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "public, max-age=300")
		h.Add("Vary", "Accept-Encoding")
		if s.cfg.PublicURL == "" {
			// The servers named are the Host the client sent, and a
			// shared cache must not give one client's document to
			// another (a forged Host would otherwise name the forger's
			// server to every client of that cache for 5 minutes); so
			// too for what a trusted proxy says the client asked for.
			h.Add("Vary", "Host")
			if len(s.cfg.TrustedProxies) > 0 {
				h.Add("Vary", "X-Forwarded-Proto, X-Forwarded-Host, Forwarded")
			}
		}
		body, tag, gz := v.plain, v.etag, acceptsGzip(r)
		if gz {
			body, tag = v.gzipped, gzipETag(v.etag)
		}
		h.Set("ETag", tag)
		if unchanged {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Type", contentType)
		if gz {
			h.Set("Content-Encoding", "gzip")
		}
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
}

// maxDocumentVariants bounds the base URLs whose documents are kept: the
// Host header is the client's to choose.
const maxDocumentVariants = 16

type documentVariant struct {
	plain, gzipped []byte
	etag           string // strong, of plain
}

func newDocumentVariant(doc []byte, base string, withBase func([]byte, string) []byte) *documentVariant {
	plain := doc
	if base != "" {
		plain = withBase(doc, base)
	}
	sum := sha256.Sum256(plain)
	return &documentVariant{plain: plain, gzipped: gzipTo(nil, plain), etag: quoteTag(sum[:])}
}

// countServing counts the plant operations in flight, and notes when the
// last ended, for Busy.
func (s *Server) countServing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serving.Add(1)
		defer func() {
			s.servedAt.Store(time.Now().UnixNano())
			s.serving.Add(-1)
		}()
		next.ServeHTTP(w, r)
	})
}

// busyGap is how long after its last plant operation a server still
// counts as serving clients: between one request's answer and the next
// request on a connection, none may be in flight.
const busyGap = 5 * time.Millisecond

// Busy says whether clients' plant operations are in flight, or were in
// the last few milliseconds: the webhook dispatcher defers its
// deliveries to them when the process is also saturated
// (webhook.DispatcherConfig.Busy).
func (s *Server) Busy() bool {
	return s.serving.Load() > 0 || time.Now().UnixNano()-s.servedAt.Load() < int64(busyGap)
}
