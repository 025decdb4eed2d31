package httpapi

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/auth"
	"github.com/plantstore/plantstore/internal/metrics"
)

// BenchmarkLayers measures what each layer of the handler costs per
// request, without net/http's own work (which the bare baseline pays
// too): a request goes through Server.ServeHTTP into an httptest
// recorder, over an in-memory store, with one layer at a time taken away
// from the full stack that serve runs. The difference between "full" and
// a variant is what that layer costs. BENCHMARKS.md has the table.
func BenchmarkLayers(b *testing.B) {
	store := newMemStore()
	for id := int64(1); id <= 1000; id++ {
		store.plants[id] = plantstore.Plant{ID: id, Name: "seeded plant " + strconv.FormatInt(id, 10), Tag: new("seed")}
	}
	tokens := &memTokens{}
	secret := plantstore.NewToken()
	tokens.add(secret, plantstore.KnownScopes...)

	variants := []struct {
		name  string
		setup func(*Config, **auth.Authenticator, *plantstore.Store)
	}{
		{"full", func(*Config, **auth.Authenticator, *plantstore.Store) {}},
		{"no-access-log", func(c *Config, _ **auth.Authenticator, _ *plantstore.Store) {
			c.AccessLog = nil
			c.Logger = slog.New(slog.DiscardHandler)
		}},
		{"slog-access-log", func(c *Config, _ **auth.Authenticator, _ *plantstore.Store) {
			c.AccessLog = nil
			c.Logger = slog.New(slog.NewJSONHandler(discard{}, nil))
		}},
		{"no-metrics", func(c *Config, _ **auth.Authenticator, s *plantstore.Store) {
			c.Observer = nil
			*s = store
		}},
		{"no-limits", func(c *Config, _ **auth.Authenticator, _ *plantstore.Store) {
			c.MaxInFlight, c.AuthFailures = 0, 0
		}},
	}
	routes := []struct {
		name, method, target, body string
	}{
		{"get", "GET", "/plants/42", ""},
		{"create", "POST", "/plants", `{"id":%d,"name":"plant number 1","tag":"bench"}`},
		{"list", "GET", "/plants?limit=100&after=100", ""},
	}
	for _, route := range routes {
		for _, v := range variants {
			b.Run(route.name+"/"+v.name, func(b *testing.B) {
				m := metrics.New()
				cfg := Config{
					AccessLog:    discard{},
					Logger:       slog.New(slog.NewJSONHandler(discard{}, nil)),
					Observer:     m,
					MaxInFlight:  1024,
					AuthFailures: 10,
				}
				var s plantstore.Store = m.InstrumentStore(store)
				authn := auth.New(tokens, auth.Options{CacheTTL: time.Hour})
				v.setup(&cfg, &authn, &s)
				srv := NewServer(s.(Store), authn, cfg)
				header := http.Header{"Authorization": {"Bearer " + secret}, "Content-Type": {"application/json"}}
				var n int64
				b.ReportAllocs()
				for b.Loop() {
					var body *bytes.Reader
					if route.body != "" {
						n++
						body = bytes.NewReader(fmtID(route.body, n))
					}
					var r *http.Request
					if body != nil {
						r = httptest.NewRequest(route.method, route.target, body)
					} else {
						r = httptest.NewRequest(route.method, route.target, nil)
					}
					r.Header = header
					r.RemoteAddr = "127.0.0.1:4242"
					w := httptest.NewRecorder()
					srv.ServeHTTP(w, r)
					if w.Code != http.StatusOK {
						b.Fatalf("%s %s: %d %s", route.method, route.target, w.Code, w.Body)
					}
				}
			})
		}
	}
}

func fmtID(format string, n int64) []byte {
	return bytes.Replace([]byte(format), []byte("%d"), strconv.AppendInt(nil, n, 10), 1)
}

// memStore is an in-memory plant store for the layer benchmarks.
type memStore struct {
	plants map[int64]plantstore.Plant
	memTokens
}

func newMemStore() *memStore { return &memStore{plants: map[int64]plantstore.Plant{}} }

func (s *memStore) CreatePlant(_ context.Context, p plantstore.Plant) (bool, error) {
	return true, nil // the benchmark measures the handler, not a map
}

func (s *memStore) GetPlant(_ context.Context, id int64) (plantstore.Plant, error) {
	p, ok := s.plants[id]
	if !ok {
		return p, plantstore.Errorf(plantstore.ENOTFOUND, "plant %d not found", id)
	}
	return p, nil
}

func (s *memStore) ListPlants(_ context.Context, opts plantstore.ListOptions) ([]plantstore.Plant, error) {
	first, _ := opts.FirstID()
	page := make([]plantstore.Plant, 0, opts.Limit)
	for id := first; len(page) < opts.Limit && id <= int64(len(s.plants)); id++ {
		page = append(page, s.plants[id])
	}
	return page, nil
}

func (s *memStore) UpdatePlant(context.Context, plantstore.Plant, plantstore.Precondition) error {
	return nil
}
func (s *memStore) DeletePlant(context.Context, int64, plantstore.Precondition) error { return nil }
func (s *memStore) Ping(context.Context) error                                        { return nil }
func (s *memStore) Close() error                                                      { return nil }

// memTokens is an in-memory token store; the webhook and event methods of
// plantstore.Store come with it, unused.
type memTokens struct {
	plantstore.WebhookStore
	plantstore.EventStore
	tokens map[plantstore.TokenHash]plantstore.Token
}

func (m *memTokens) add(secret string, scopes ...string) {
	if m.tokens == nil {
		m.tokens = map[plantstore.TokenHash]plantstore.Token{}
	}
	m.tokens[plantstore.HashToken(secret)] = plantstore.Token{ID: int64(len(m.tokens) + 1), Name: "bench", Scopes: scopes}
}

func (m *memTokens) CreateToken(context.Context, plantstore.Token, plantstore.TokenHash) (plantstore.Token, error) {
	panic("unused")
}

func (m *memTokens) TokenByHash(_ context.Context, h plantstore.TokenHash) (plantstore.Token, error) {
	t, ok := m.tokens[h]
	if !ok {
		return t, plantstore.Errorf(plantstore.ENOTFOUND, "no such token")
	}
	return t, nil
}

func (m *memTokens) ListTokens(context.Context, bool) ([]plantstore.Token, error) { panic("unused") }
func (m *memTokens) RevokeToken(context.Context, string, time.Time) error         { panic("unused") }
func (m *memTokens) ReplaceToken(context.Context, plantstore.Token, plantstore.TokenHash) (plantstore.Token, bool, error) {
	panic("unused")
}
func (m *memTokens) RecordTokenUse(context.Context, map[int64]time.Time) error { return nil }
func (m *memTokens) ActiveTokenHashes(context.Context, int) ([]plantstore.TokenHash, error) {
	return slices.Collect(maps.Keys(m.tokens)), nil
}

// BenchmarkLayer measures each piece of the request path alone, for the
// per-layer table in BENCHMARKS.md (the whole-stack variants above are
// within the noise of each other on a shared machine).
func BenchmarkLayer(b *testing.B) {
	tokens := &memTokens{}
	secret := plantstore.NewToken()
	tokens.add(secret, plantstore.KnownScopes...)
	r := httptest.NewRequest("GET", "/plants/42", nil)
	r.RemoteAddr = "127.0.0.1:4242"
	b.Run("request-id", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = incomingRequestID(nil)
		}
	})
	b.Run("deadline-context", func(b *testing.B) {
		d := newDeadlines(DefaultRequestTimeout)
		b.ReportAllocs()
		for b.Loop() {
			ctx := context.WithValue(d.context(time.Now()), requestInfoKey{}, &requestInfo{})
			_ = r.WithContext(ctx)
		}
	})
	b.Run("timer-context", func(b *testing.B) { // what deadline-context replaced
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(r.Context(), DefaultRequestTimeout)
			_ = r.WithContext(context.WithValue(ctx, requestInfoKey{}, &requestInfo{}))
			cancel()
		}
	})
	entry := &accessEntry{start: time.Now(), method: "GET", path: "/plants/12345", status: 200, duration: 302 * time.Microsecond,
		bytes: 45, info: &requestInfo{id: "0123456789abcdef-4bot", token: "bench"}, remote: "127.0.0.1:47684"}
	b.Run("access-log", func(b *testing.B) {
		s := &Server{cfg: Config{AccessLog: discard{}}}
		b.ReportAllocs()
		for b.Loop() {
			s.logRequest(context.Background(), entry)
		}
	})
	b.Run("access-log-slog", func(b *testing.B) {
		s := &Server{log: slog.New(slog.NewJSONHandler(discard{}, nil))}
		b.ReportAllocs()
		for b.Loop() {
			s.logRequest(context.Background(), entry)
		}
	})
	b.Run("auth-cached", func(b *testing.B) {
		authn := auth.New(tokens, auth.Options{CacheTTL: time.Hour})
		authn.Authenticate(context.Background(), secret)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := authn.Authenticate(context.Background(), secret); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("auth-throttle-lookup", func(b *testing.B) { // only once an address is throttled
		s := NewServer(nil, nil, Config{AuthFailures: 10})
		s.authFailures.spend(netipAddr("10.0.0.1"), time.Now())
		b.ReportAllocs()
		for b.Loop() {
			s.authFailures.left(s.clientAddr(r), time.Now())
		}
	})
	body := []byte(`{"id":123456789,"name":"Monstera deliciosa","tag":"tropical"}`)
	b.Run("decode-create", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if p, err := decodeNewPlant(body); err != nil || p.Validate() != nil {
				b.Fatal(err)
			}
		}
	})
	tag := "tropical"
	b.Run("encode-plant", func(b *testing.B) {
		p := storedPlantBody{ID: 123456789, Name: "Monstera deliciosa", Tag: &tag}
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = p.appendJSON(buf[:0])
		}
	})
	page := make(plantPage, 100)
	for i := range page {
		page[i] = plantstore.Plant{ID: int64(i + 1), Name: "seeded plant " + strconv.Itoa(i+1), Tag: &tag}
	}
	b.Run("encode-page", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = page.appendJSON(buf[:0])
		}
	})
	b.Run("gzip-page", func(b *testing.B) { // what compressing a page adds
		body := page.appendJSON(nil)
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = gzipTo(buf[:0], body)
		}
		b.ReportMetric(float64(len(body)), "plain-bytes")
		b.ReportMetric(float64(len(buf)), "gzip-bytes")
	})
	b.Run("encode-page-marshal", func(b *testing.B) { // what the hand encoder replaced
		bodies := marshalForm(page)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(bodies); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("metrics", func(b *testing.B) {
		m := metrics.New()
		b.ReportAllocs()
		for b.Loop() {
			m.RequestStarted()
			m.RequestDone("GET /plants/{id}", "GET", 200, time.Millisecond)
		}
	})
	b.Run("routing", func(b *testing.B) {
		mux := http.NewServeMux()
		nop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
		for _, p := range []string{"GET /plants", "POST /plants", "GET /plants/{id}", "PUT /plants/{id}", "DELETE /plants/{id}", "GET /healthz"} {
			mux.Handle(p, nop)
		}
		b.ReportAllocs()
		for b.Loop() {
			mux.ServeHTTP(nil, r)
		}
	})
}

func netipAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
