// Package httpapi is the HTTP transport of the Plant Store API: routing,
// authentication, decoding and encoding, and the mapping of errors to
// statuses. It depends on the domain package only; storage engines are
// given to it as interfaces.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/api"
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
	// it a request gets 503 at once.
	MaxInFlight int
	// TokenRate is the requests per second each token may make, in bursts
	// of up to TokenBurst (default twice the rate, at least 1); beyond it,
	// 429.
	TokenRate  float64
	TokenBurst int
	// AuthFailures is how many refused tokens one client address may send
	// per AuthFailureWindow (default 1 minute), all at once if it likes;
	// beyond that its plant operations get 429, valid token or not.
	AuthFailures      int
	AuthFailureWindow time.Duration
	// TrustedProxies are the proxies whose X-Forwarded-For names the client
	// address for AuthFailures; from any other peer the header is ignored.
	TrustedProxies []netip.Prefix
	Logger         *slog.Logger
	// Observer, when set, is told of every request, for metrics.
	Observer Observer
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
	DefaultRequestTimeout    = 10 * time.Second
	DefaultAuthFailureWindow = time.Minute
)

// Authenticator turns a bearer token into the token record it stands for,
// or fails with EUNAUTHORIZED (or the store's EUNAVAILABLE).
type Authenticator interface {
	Authenticate(ctx context.Context, secret string) (plantstore.Token, error)
}

// Store is what the handlers need of a storage engine.
type Store interface {
	plantstore.PlantStore
	Ping(ctx context.Context) error
}

// Server answers the Plant Store API.
type Server struct {
	store   Store
	auth    Authenticator
	log     *slog.Logger
	cfg     Config
	handler http.Handler

	inFlight     atomic.Int64
	tokenRate    *tokenBuckets[int64]      // by token ID; nil when off
	authFailures *tokenBuckets[netip.Addr] // by clientAddr; nil when off
}

// NewServer returns the API's handler over store, checking tokens with
// authn.
func NewServer(store Store, authn Authenticator, cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{store: store, auth: authn, log: cfg.Logger, cfg: cfg}
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
	mux := http.NewServeMux()
	s.routes(mux)
	s.handler = s.observe(s.recoverPanics(s.withTimeout(mux)))
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// routes is the whole API on one screen. Patterns for GET also answer HEAD.
// Anything else gets 404, or 405 with Allow, from the mux, turned into the
// Error body by observe.
func (s *Server) routes(mux *http.ServeMux) {
	read, write := plantstore.ScopePlantsRead, plantstore.ScopePlantsWrite
	// A plant operation counts against MaxInFlight, then needs a token
	// (which the failed-authentication throttle and the token's rate
	// limit guard; see requireScope).
	plants := func(scope string, h http.Handler) http.Handler {
		return s.limitInFlight(s.requireScope(scope, h))
	}
	handle := func(pattern string, h http.Handler) { mux.Handle(pattern, withRoute(pattern, h)) }
	handle("GET /plants", plants(read, s.handleListPlants()))
	handle("POST /plants", plants(write, s.handleCreatePlant()))
	handle("GET /plants/{id}", plants(read, s.handleGetPlant()))
	handle("PUT /plants/{id}", plants(write, s.handleUpdatePlant()))
	handle("DELETE /plants/{id}", plants(write, s.handleDeletePlant()))

	handle("GET /healthz", s.handleHealth())
	handle("GET /readyz", s.handleReady())
	handle("GET /openapi.json", serveDocument("application/json", api.JSON))
	handle("GET /openapi.yaml", serveDocument("application/yaml", api.YAML))
	handle("GET /docs", docs.Page("Plant Store API reference"))
	handle("GET "+docs.BundlePath, docs.Bundle())
}

// withRoute notes the pattern that matched, for metrics: the mux sets it
// on its own copy of the request, which the outer layers never see.
func withRoute(pattern string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		infoFrom(r.Context()).route = pattern
		h.ServeHTTP(w, r)
	})
}

type statusBody struct {
	Status string `json:"status"`
}

// handleHealth says the process is up; it touches nothing else.
func (s *Server) handleHealth() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, statusBody{Status: "ok"})
	})
}

// handleReady says whether the store answers, within a second.
func (s *Server) handleReady() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

func serveDocument(contentType string, doc []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "public, max-age=300")
		w.Write(doc)
	})
}

// writeJSON answers with v as JSON. Our values always encode, so an error
// here can only be the client going away.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":500,"message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b)
}
