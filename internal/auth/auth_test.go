package auth

import (
	"context"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/sqlite"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func setup(t *testing.T) (*Authenticator, *sqlite.DB, *clock) {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "a.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	return New(db, Options{CacheTTL: 2 * time.Second, Now: c.now}), db, c
}

func issue(t *testing.T, db *sqlite.DB, name string) string {
	t.Helper()
	secret := plantstore.NewToken()
	if _, err := db.CreateToken(context.Background(), plantstore.Token{Name: name, Scopes: plantstore.KnownScopes}, plantstore.HashToken(secret)); err != nil {
		t.Fatal(err)
	}
	return secret
}

func TestAuthenticate(t *testing.T) {
	a, db, _ := setup(t)
	secret := issue(t, db, "alice")
	tok, err := a.Authenticate(context.Background(), secret)
	if err != nil || tok.Name != "alice" {
		t.Fatalf("Authenticate = %+v, %v", tok, err)
	}
	for _, bad := range []string{"", "pst_", "nope", secret[:len(secret)-1], secret + "x", plantstore.NewToken()} {
		if _, err := a.Authenticate(context.Background(), bad); plantstore.ErrorCode(err) != plantstore.EUNAUTHORIZED {
			t.Errorf("Authenticate(%q) = %v, want %s", bad, err, plantstore.EUNAUTHORIZED)
		}
	}
	// A flipped character breaks the checksum: refused without a lookup.
	flipped := []byte(secret)
	flipped[10] ^= 1
	if plantstore.WellFormedToken(string(flipped)) {
		t.Error("a token with a flipped character is still well formed")
	}
}

// A revocation bites once the cached entry expires, never later.
func TestRevocationWithinCacheTTL(t *testing.T) {
	a, db, c := setup(t)
	secret := issue(t, db, "bob")
	if _, err := a.Authenticate(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	if err := db.RevokeToken(context.Background(), "bob", c.now()); err != nil {
		t.Fatal(err)
	}
	c.advance(2 * time.Second)
	if _, err := a.Authenticate(context.Background(), secret); plantstore.ErrorCode(err) != plantstore.EUNAUTHORIZED {
		t.Errorf("revoked token after the cache TTL: %v, want %s", err, plantstore.EUNAUTHORIZED)
	}
}

func TestLastUseFlushed(t *testing.T) {
	a, db, c := setup(t)
	secret := issue(t, db, "carol")
	if _, err := a.Authenticate(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second) // a cached hit later still counts as use
	if _, err := a.Authenticate(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	tok, err := db.TokenByHash(context.Background(), plantstore.HashToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	if !tok.LastUsedAt.Equal(c.now()) {
		t.Errorf("LastUsedAt = %v, want %v", tok.LastUsedAt, c.now())
	}
}

func TestCacheBounded(t *testing.T) {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "a.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a := New(db, Options{CacheSize: 3})
	for i := range 10 {
		secret := issue(t, db, string(rune('a'+i)))
		if _, err := a.Authenticate(context.Background(), secret); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(a.cache); n > 3 {
		t.Errorf("cache holds %d entries, bound is 3", n)
	}
}

// BenchmarkAuthenticate measures a token check: from the cache (every
// request but one per TTL) and, as the baseline, from the store.
func BenchmarkAuthenticate(b *testing.B) {
	db, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "a.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	secret := plantstore.NewToken()
	if _, err := db.CreateToken(context.Background(), plantstore.Token{Name: "b", Scopes: plantstore.KnownScopes}, plantstore.HashToken(secret)); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"store", time.Nanosecond}, {"cached", time.Hour}} {
		b.Run(tc.name, func(b *testing.B) {
			a := New(db, Options{CacheTTL: tc.ttl})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Authenticate(context.Background(), secret); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestCacheStats(t *testing.T) {
	a, db, c := setup(t)
	secret := issue(t, db, "alice")
	for range 3 {
		if _, err := a.Authenticate(context.Background(), secret); err != nil {
			t.Fatal(err)
		}
	}
	a.Authenticate(context.Background(), plantstore.NewToken()) // unknown: a miss
	a.Authenticate(context.Background(), "malformed")           // refused before the cache
	if got := a.Stats(); got != (CacheStats{Hits: 2, Misses: 2}) {
		t.Errorf("after 3 uses of one token and an unknown one: %+v, want 2 hits, 2 misses", got)
	}
	c.advance(3 * time.Second) // the entry expires
	a.Authenticate(context.Background(), secret)
	if got := a.Stats(); got.Misses != 3 {
		t.Errorf("an expired entry is not a hit: %+v", got)
	}
}

// The hash from Hash serves every later step: the cache, Known (stale
// entries included) and Lookup. A malformed token hashes to the zero
// TokenHash, which every step refuses without asking the store.
func TestHashServesEveryStep(t *testing.T) {
	a, db, c := setup(t)
	secret := issue(t, db, "dave")
	hash := a.Hash(secret)
	if hash != plantstore.HashToken(secret) {
		t.Fatal("Hash is not the stored hash")
	}
	if _, ok := a.Cached(hash); ok || a.Known(hash) {
		t.Error("a token never looked up is cached or known")
	}
	if tok, err := a.Lookup(context.Background(), hash); err != nil || tok.Name != "dave" {
		t.Fatalf("Lookup = %+v, %v", tok, err)
	}
	if tok, ok := a.Cached(hash); !ok || tok.Name != "dave" || !a.Known(hash) {
		t.Errorf("after its lookup: Cached = %+v, %v; Known = %v", tok, ok, a.Known(hash))
	}
	c.advance(3 * time.Second)
	if _, ok := a.Cached(hash); ok || !a.Known(hash) {
		t.Errorf("a stale entry: Cached %v, Known %v; want false, true", ok, a.Known(hash))
	}

	before := a.Stats()
	malformed := a.Hash("pst_guess")
	if malformed != (plantstore.TokenHash{}) {
		t.Errorf("a malformed token's hash is %x, want zero", malformed)
	}
	if _, ok := a.Cached(malformed); ok || a.Known(malformed) {
		t.Error("the zero hash is cached or known")
	}
	if _, err := a.Lookup(context.Background(), malformed); plantstore.ErrorCode(err) != plantstore.EUNAUTHORIZED || !strings.Contains(plantstore.ErrorMessage(err), "malformed") {
		t.Errorf("Lookup of the zero hash: %v, want %s saying malformed", err, plantstore.EUNAUTHORIZED)
	}
	if a.Stats() != before {
		t.Errorf("a malformed token was looked for: %+v, then %+v", before, a.Stats())
	}
}

// Known takes the roster of active tokens as last read: a token never
// looked up is known once the roster is read after it was made, and a
// revoked one is no longer known once the roster is read again.
func TestKnownFromRoster(t *testing.T) {
	a, db, c := setup(t)
	ctx := context.Background()
	secret := issue(t, db, "carol")
	hash := a.Hash(secret)
	if a.Known(hash) {
		t.Fatal("known before the roster was read or the token looked up")
	}
	if err := a.RefreshRoster(ctx); err != nil {
		t.Fatal(err)
	}
	if !a.Known(hash) {
		t.Error("an active token is not known after the roster was read")
	}
	if a.Known(a.Hash(plantstore.NewToken())) || a.Known(plantstore.TokenHash{}) {
		t.Error("a guess, or a malformed token, is known")
	}
	if err := db.RevokeToken(ctx, "carol", c.now()); err != nil {
		t.Fatal(err)
	}
	if err := a.RefreshRoster(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Known(hash) {
		t.Error("a revoked token, never looked up, is still known after the roster was read again")
	}
}

// failingStore is a store whose roster cannot be read while down is set,
// as in a database outage.
type failingStore struct {
	*sqlite.DB
	down atomic.Bool
}

func (s *failingStore) ActiveTokenHashes(ctx context.Context, n int) ([]plantstore.TokenHash, error) {
	if s.down.Load() {
		return nil, plantstore.Errorf(plantstore.EUNAVAILABLE, "the store cannot be reached")
	}
	return s.DB.ActiveTokenHashes(ctx, n)
}

// An outage of the store is said once, not at every reading of the
// roster, and its end is said too.
func TestStoreOutageLoggedOnce(t *testing.T) {
	_, db, _ := setup(t)
	store := &failingStore{DB: db}
	store.down.Store(true)
	var logs apitest.Buffer
	a := New(store, Options{RosterInterval: 2 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	time.Sleep(200 * time.Millisecond) // some 100 readings
	store.down.Store(false)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "works again"); {
		if time.Now().After(deadline) {
			t.Fatalf("no line says the roster is read again:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), `level=WARN msg="read the roster of active tokens"`); n != 1 {
		t.Errorf("%d lines for the outage, want 1:\n%s", n, logs.String())
	}
	if !regexp.MustCompile(`level=INFO msg="read the roster of active tokens: works again" failures=\d\d`).MatchString(logs.String()) {
		t.Errorf("the end of the outage is not said with its count of failures:\n%s", logs.String())
	}
}
