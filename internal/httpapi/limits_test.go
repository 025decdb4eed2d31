package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func TestTokenBucketsTake(t *testing.T) {
	b := newTokenBuckets[string](1, 3, 100) // 3 at once, then one a second
	for i := range 3 {
		if wait := b.take("a", t0); wait != 0 {
			t.Fatalf("take %d of a burst of 3: wait %v", i+1, wait)
		}
	}
	if wait := b.take("a", t0); wait != time.Second {
		t.Errorf("a fourth take at once: wait %v, want 1s", wait)
	}
	if wait := b.take("a", t0.Add(400*time.Millisecond)); wait != 600*time.Millisecond {
		t.Errorf("a fourth take 400ms later: wait %v, want 600ms", wait)
	}
	if wait := b.take("b", t0); wait != 0 {
		t.Errorf("another key shares the bucket: wait %v", wait)
	}
	if wait := b.take("a", t0.Add(time.Second)); wait != 0 {
		t.Errorf("a second later: wait %v, want a token", wait)
	}
	// Idle for long, a bucket holds a burst and no more.
	later := t0.Add(time.Hour)
	for i := range 3 {
		if wait := b.take("a", later); wait != 0 {
			t.Fatalf("take %d after an hour: wait %v", i+1, wait)
		}
	}
	if wait := b.take("a", later); wait == 0 {
		t.Error("an idle hour saved more than a burst")
	}
}

func TestTokenBucketsSpendRunsIntoDebt(t *testing.T) {
	b := newTokenBuckets[string](1, 2, 100)
	var emptied []int
	for i := range 5 {
		if b.spend("a", t0) {
			emptied = append(emptied, i+1)
		}
	}
	if fmt.Sprint(emptied) != "[2]" {
		t.Errorf("spends that emptied the bucket: %v, want [2] (said once)", emptied)
	}
	// Five spent, two at once allowed: one token back takes four seconds.
	if wait := waitOf(b, "a", t0); wait != 4*time.Second {
		t.Errorf("wait %v after 5 spends of a burst of 2 at 1/s, want 4s", wait)
	}
	if wait := waitOf(b, "a", t0.Add(4*time.Second)); wait != 0 {
		t.Errorf("wait %v once the debt is repaid", wait)
	}
}

func TestTokenBucketsWaitRemembersNothing(t *testing.T) {
	b := newTokenBuckets[int](1, 1, 100)
	for i := range 1000 {
		if wait := waitOf(b, i, t0); wait != 0 {
			t.Fatalf("unknown key %d: wait %v", i, wait)
		}
	}
	if n := b.size(); n != 0 {
		t.Errorf("%d keys held after looking only", n)
	}
}

// Buckets that are full again are forgotten; a flood of distinct keys
// never holds more than maxKeys.
func TestTokenBucketsStayBounded(t *testing.T) {
	b := newTokenBuckets[int](10, 10, 5000) // full again 1 s after one take
	for i := range 3000 {
		b.take(i, t0)
	}
	if n := b.size(); n != 3000 {
		t.Fatalf("%d keys held, want 3000", n)
	}
	later := t0.Add(2 * time.Second)
	for i := range 3000 {
		b.take(-1-i, later)
	}
	if n := b.size(); n > 3000 {
		t.Errorf("%d keys held: the idle ones were not forgotten", n)
	}
	for i := range 100_000 {
		b.spend(1_000_000+i, later)
		if n := b.size(); n > 5000 {
			t.Fatalf("%d keys held after %d distinct keys, limit 5000", n, i+1)
		}
	}
}

func TestClientAddr(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	cases := []struct {
		remote, forwarded string
		trusted           []netip.Prefix
		want              string
	}{
		{"192.0.2.1:1234", "", nil, "192.0.2.1"},
		{"[::ffff:192.0.2.1]:1234", "", nil, "192.0.2.1"},
		{"[2001:db8:1:2:3:4:5:6]:1234", "", nil, "2001:db8:1:2::"},
		{"[fe80::1%eth0]:1234", "", nil, "fe80::"},
		{"192.0.2.1:1234", "203.0.113.9", nil, "192.0.2.1"},                              // no proxy trusted: the header is ignored
		{"192.0.2.1:1234", "203.0.113.9", proxies, "192.0.2.1"},                          // nor from a peer that is not a proxy
		{"10.1.1.1:1234", "203.0.113.9", proxies, "203.0.113.9"},                         // from a trusted proxy
		{"10.1.1.1:1234", "198.51.100.1, 203.0.113.9, 10.2.2.2", proxies, "203.0.113.9"}, // the nearest untrusted hop; the client could have written the rest
		{"10.1.1.1:1234", "203.0.113.9:5555", proxies, "203.0.113.9"},
		{"10.1.1.1:1234", "[2001:db8::9]", proxies, "2001:db8::"},
		{"10.1.1.1:1234", "10.3.3.3", proxies, "10.3.3.3"},       // only proxies: the farthest
		{"10.1.1.1:1234", "junk, 10.3.3.3", proxies, "10.3.3.3"}, // a malformed hop ends the walk
		{"10.1.1.1:1234", "", proxies, "10.1.1.1"},
		{"[fd00::1]:1234", "203.0.113.9", proxies, "203.0.113.9"},
		// A link-local proxy, its zone dropped: a prefix holds no zoned address.
		{"[fe80::1%eth0]:1234", "203.0.113.9", []netip.Prefix{netip.MustParsePrefix("fe80::/10")}, "203.0.113.9"},
	}
	for _, tc := range cases {
		s := &Server{cfg: Config{TrustedProxies: tc.trusted}}
		r := httptest.NewRequest("GET", "/plants", nil)
		r.RemoteAddr = tc.remote
		if tc.forwarded != "" {
			r.Header.Set("X-Forwarded-For", tc.forwarded)
		}
		if got := s.clientAddr(r); got.String() != tc.want {
			t.Errorf("from %s, X-Forwarded-For %q, trusted %v: %s, want %s", tc.remote, tc.forwarded, tc.trusted, got, tc.want)
		}
	}
	// Several headers are one list, in order.
	s := &Server{cfg: Config{TrustedProxies: proxies}}
	r := httptest.NewRequest("GET", "/plants", nil)
	r.RemoteAddr = "10.1.1.1:1234"
	r.Header.Add("X-Forwarded-For", "203.0.113.9")
	r.Header.Add("X-Forwarded-For", "10.2.2.2")
	if got := s.clientAddr(r); got.String() != "203.0.113.9" {
		t.Errorf("two headers: %s, want 203.0.113.9", got)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "1", time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", 6 * time.Second: "6",
	} {
		if got := retryAfterSeconds(d); got != want {
			t.Errorf("retryAfterSeconds(%v) = %s, want %s", d, got, want)
		}
	}
}

// BenchmarkTokenBuckets is the cost a rate limit adds to a request: one
// take, here from many goroutines over 1,000 tokens.
func BenchmarkTokenBuckets(b *testing.B) {
	buckets := newTokenBuckets[int64](1e9, 1e9, maxBucketKeys)
	b.RunParallel(func(pb *testing.PB) {
		var key int64
		for pb.Next() {
			key = (key + 1) % 1000
			buckets.take(key, time.Now())
		}
	})
}

// BenchmarkLimits compares a whole plant read through the handler, with a
// cache-like store and authenticator, with the limits off and on: off
// must cost nothing, on a few map lookups.
func BenchmarkLimits(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"off", Config{}},
		{"on", Config{MaxInFlight: 1024, TokenRate: 1e9, AuthFailures: 10}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := NewServer(fixedStore{}, fixedAuth{}, bc.cfg)
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/plants/1", nil)
				r.Header.Set("Authorization", "Bearer pst_anything")
				for pb.Next() {
					w := discardWriter{header: http.Header{}}
					s.ServeHTTP(&w, r)
					if w.status != http.StatusOK {
						b.Fatalf("status %d", w.status)
					}
				}
			})
		})
	}
}

type fixedStore struct{ Store }

func (fixedStore) GetPlant(context.Context, int64) (plantstore.Plant, error) {
	return plantstore.Plant{ID: 1, Name: "Fern"}, nil
}

// fixedAuth accepts every token as benchToken, from its cache.
type fixedAuth struct{}

var benchToken = plantstore.Token{ID: 1, Name: "bench", Scopes: plantstore.KnownScopes}

func (fixedAuth) Hash(string) plantstore.TokenHash                     { return plantstore.TokenHash{1} }
func (fixedAuth) Cached(plantstore.TokenHash) (plantstore.Token, bool) { return benchToken, true }
func (fixedAuth) Known(plantstore.TokenHash) bool                      { return true }
func (fixedAuth) RosterDue(time.Time) time.Duration                    { return time.Second }

func (fixedAuth) Lookup(context.Context, plantstore.TokenHash) (plantstore.Token, error) {
	return benchToken, nil
}

type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }
func (w *discardWriter) Write(p []byte) (int, error) { return io.Discard.Write(p) }

// A map full of live buckets keeps them all, locks included, and tracks
// no newcomer rather than forget one: filling the map must not lift a
// lock.
func TestTokenBucketsFullKeepsLiveBuckets(t *testing.T) {
	const maxKeys = 1024
	b := newTokenBuckets[int](1.0/60, 1, maxKeys) // one token a minute
	now := time.Now()
	locked := 0
	b.spend(locked, now) // its one token spent: locked for a minute
	if waitOf(b, locked, now) == 0 {
		t.Fatal("not locked after its token was spent")
	}
	for k := 1; k < 3*maxKeys; k++ {
		b.spend(k, now.Add(time.Duration(k)*time.Millisecond))
	}
	if b.size() > maxKeys {
		t.Errorf("%d keys held, above the bound of %d", b.size(), maxKeys)
	}
	if waitOf(b, locked, now.Add(time.Second)) == 0 {
		t.Error("filling the map lifted a live lock")
	}
	// Once buckets refill, they make room again.
	later := now.Add(2 * time.Minute)
	if b.spend(-1, later); waitOf(b, -1, later) == 0 {
		t.Error("a newcomer after the buckets refilled is not tracked")
	}
}

// waitOf is how long until key's bucket in b holds a token (left's wait):
// 0 if it holds one now.
func waitOf[K comparable](b *tokenBuckets[K], key K, now time.Time) time.Duration {
	_, wait := b.left(key, now)
	return wait
}
