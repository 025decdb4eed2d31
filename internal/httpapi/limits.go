package httpapi

import (
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/plantstore/plantstore"
)

// The request limits: a cap on plant operations in flight, a rate per
// token, and a throttle on failed authentication per client address. Each
// is off when its Config field is zero, and then costs nothing: the
// wrappers below are not installed, or test one nil pointer.

// retryAfterSeconds is d as Retry-After wants it: whole seconds, rounded
// up, and at least 1, as "0" would invite an immediate retry.
func retryAfterSeconds(d time.Duration) string {
	s := (d + time.Second - 1) / time.Second
	return strconv.FormatInt(max(1, int64(s)), 10)
}

// limitInFlight takes a slot of the authenticated token's (429 beyond
// MaxInFlightPerToken) and then one of the service's (503 beyond
// MaxInFlight) for the rest of the request, so that a flood is refused in
// microseconds instead of queueing behind the store without bound, and no
// one token, with slow bodies say, can hold every slot. It runs after
// authentication: a client without a valid token holds no slot. Only the
// plant operations count: /healthz must answer while the service is
// saturated, /readyz asks the store, which has its own limit, and the
// documents cost nothing.
func (s *Server) limitInFlight(next http.Handler) http.Handler {
	limit := int64(s.cfg.MaxInFlight)
	if limit <= 0 && s.perToken == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.perToken != nil {
			id := infoFrom(r.Context()).tokenID
			if !s.perToken.take(id) {
				s.writeError(w, r, limitError("token_in_flight", http.StatusTooManyRequests,
					"this access token has as many requests in flight as it may; retry when one has been answered", time.Second))
				return
			}
			defer s.perToken.give(id)
		}
		if limit > 0 {
			if s.inFlight.Add(1) > limit {
				s.inFlight.Add(-1)
				s.writeError(w, r, limitError("in_flight", http.StatusServiceUnavailable,
					"the service is serving as many requests as it can; retry shortly", time.Second))
				return
			}
			defer s.inFlight.Add(-1)
		}
		next.ServeHTTP(w, r)
	})
}

// tokenSlots counts the requests in flight of each token.
type tokenSlots struct {
	max  int
	mu   sync.Mutex
	held map[int64]int // tokens with none are not kept
}

func (t *tokenSlots) take(id int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held[id] >= t.max {
		return false
	}
	t.held[id]++
	return true
}

func (t *tokenSlots) give(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held[id]--; t.held[id] <= 0 {
		delete(t.held, id)
	}
}

// limitAddress answers 429 to a client address beyond AddressRate on the
// unauthenticated routes it guards. An address throttled for failed
// authentications is served there all the same: those requests carry no
// token to guess with, and a readiness probe behind the same NAT or proxy
// as a guesser must not fail for the guesses (the instance would be taken
// out of rotation).
func (s *Server) limitAddress(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.addressRate == nil {
			next.ServeHTTP(w, r)
			return
		}
		if wait := s.addressRate.take(s.clientAddr(r), time.Now()); wait > 0 {
			s.writeError(w, r, limitError("address_rate", http.StatusTooManyRequests,
				"this address has exceeded its request rate; retry after the time in Retry-After", wait))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// tokenRateExceeded answers 429 when the token has spent its allowance.
func (s *Server) tokenRateExceeded(w http.ResponseWriter, r *http.Request, tokenID int64) bool {
	if s.tokenRate == nil {
		return false
	}
	wait := s.tokenRate.take(tokenID, time.Now())
	if wait == 0 {
		return false
	}
	s.writeError(w, r, limitError("token_rate", http.StatusTooManyRequests,
		"this access token has exceeded its rate limit; retry after the time in Retry-After", wait))
	return true
}

// reserveLookup answers 429, without looking the token up, when the
// client's address has failed authentication too often and the token of
// hash (Authenticator.Hash) is not one this process knows to be valid
// (Authenticator.Known: in its cache, or on the roster of active tokens
// it reads every few seconds). So a guesser gets no answer about its
// guesses and costs no lookup, while the valid tokens of others behind
// the same address (a proxy, a load balancer, a NAT) are still served:
// one stranger's bad tokens cannot lock them out. A valid token made
// since the roster's last reading is refused until the next one, or an
// attempt the address regains, whichever comes first: its Retry-After. (The alternative, looking up every token
// and refusing only the unknown ones, would answer each guess.)
//
// Otherwise the lookup goes ahead when fewer lookups from the address
// are in flight than the attempts it has left, and else waits for one to
// end: guesses sent together are counted as they come, not once each is
// answered, so no more than the allowed attempts reach the store however
// many race in, while a valid token's lookups (a client's pool of
// connections after a restart) wait a moment at most, never 429. Only
// lookups come here: a token found in the cache costs the throttle
// nothing.
func (s *Server) reserveLookup(w http.ResponseWriter, r *http.Request, hash plantstore.TokenHash) (slot lookupSlot, refused bool) {
	if s.authFailures == nil {
		return slot, false
	}
	// Wanted even when the lookup takes no place: settleLookup counts a
	// refusal of a known token (revoked since) against the address too.
	slot.addr = s.clientAddr(r)
	if s.auth.Known(hash) {
		return slot, false
	}
	for {
		now := time.Now()
		left, wait := s.authFailures.left(slot.addr, now)
		if left == 0 {
			// A valid token is Known once the roster is read again: its
			// client may retry then, however long the address's back-off.
			s.writeError(w, r, authFailuresError(min(wait, max(s.auth.RosterDue(now), time.Millisecond))))
			return slot, true
		}
		ended, ok := s.lookups.enter(slot.addr, left)
		if ok {
			slot.reserved = true
			return slot, false
		}
		select {
		case <-ended:
		case <-r.Context().Done():
			s.writeError(w, r, plantstore.WrapError(plantstore.EUNAVAILABLE, "the service did not answer in time", r.Context().Err()))
			return slot, true
		}
	}
}

// lookupSlot is a lookup's place among its address's lookups in flight.
type lookupSlot struct {
	addr     netip.Addr // the client's, whenever the throttle is on
	reserved bool
}

// settleLookup counts a refused token against its address, then gives
// the lookup's place back.
func (s *Server) settleLookup(r *http.Request, slot lookupSlot, err error) {
	if s.countsAsGuess(err) {
		s.noteAuthFailure(r, slot.addr)
	}
	if slot.reserved {
		s.lookups.leave(slot.addr)
	}
}

// lookupGate counts the token lookups in flight from each address.
type lookupGate struct {
	mu       sync.Mutex
	inFlight map[netip.Addr]int
	ended    chan struct{} // closed, and replaced, when a lookup ends
}

// enter takes a place for a lookup from addr if fewer than max are in
// flight; otherwise it returns a channel closed when one ends.
func (g *lookupGate) enter(addr netip.Addr, max int) (<-chan struct{}, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight == nil {
		g.inFlight, g.ended = map[netip.Addr]int{}, make(chan struct{})
	}
	if g.inFlight[addr] < max {
		g.inFlight[addr]++
		return nil, true
	}
	return g.ended, false
}

func (g *lookupGate) leave(addr netip.Addr) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight[addr]--; g.inFlight[addr] <= 0 {
		delete(g.inFlight, addr)
	}
	close(g.ended)
	g.ended = make(chan struct{})
}

func authFailuresError(wait time.Duration) error {
	return limitError("auth_failures", http.StatusTooManyRequests,
		"too many failed authentications from this address; retry after the time in Retry-After", wait)
}

// isGuess says whether err refused a bearer token that was sent: a
// guess. A request without credentials is not one.
func isGuess(err error) bool {
	e, ok := errors.AsType[*httpError](err)
	return ok && e.bearerError == "invalid_token"
}

// countsAsGuess says whether the throttle is on and err refused a guess,
// which noteAuthFailure should count.
func (s *Server) countsAsGuess(err error) bool {
	return s.authFailures != nil && isGuess(err)
}

// noteAuthFailure counts a refused token against addr, the client's
// address (clientAddr). Only a bearer token that was sent and refused
// counts (a guess, countsAsGuess); a request without credentials is not
// one. Successes do not reset the count, or a holder of one valid token
// could interleave it with guesses at others.
func (s *Server) noteAuthFailure(r *http.Request, addr netip.Addr) {
	if s.authFailures.spend(addr, time.Now()) {
		s.logThrottled(r, addr)
	}
}

func (s *Server) logThrottled(r *http.Request, addr netip.Addr) {
	s.log.LogAttrs(r.Context(), slog.LevelWarn, "client address throttled after repeated authentication failures",
		slog.String("request_id", requestID(r.Context())),
		slog.String("address", addr.String()),
		slog.String("remote", r.RemoteAddr),
		slog.Int("failures", s.cfg.AuthFailures),
		slog.String("window", s.cfg.AuthFailureWindow.String()))
}

// clientAddr is the key of the failed-authentication throttle: the
// address the request came from, or, when that is a trusted proxy, the
// nearest address in X-Forwarded-For that is not one (the ones before it
// could be forged by the client). An IPv6 address stands for its /64, as
// one host commonly holds a whole /64.
func (s *Server) clientAddr(r *http.Request) netip.Addr {
	addr, _, ok := s.origin(r)
	if !ok {
		return netip.Addr{} // not over TCP; all such requests share one key
	}
	return addressKey(addr)
}

// peerAddr is a connection's remote address as the per-address limits and
// the trusted proxies see it: an IPv4-mapped address as IPv4, and no IPv6
// zone (a prefix holds no zoned address).
func peerAddr(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// addressKey is the key a client address counts under in the per-address
// limits: an IPv6 address stands for its /64, as one host commonly holds
// a whole /64.
func addressKey(a netip.Addr) netip.Addr {
	if a.Is6() {
		return netip.PrefixFrom(a.WithZone(""), 64).Masked().Addr()
	}
	return a
}

// inPrefixes says whether addr is in one of prefixes.
func inPrefixes(prefixes []netip.Prefix, addr netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// origin is the address a request came from, and the peer's: the peer's
// own, or when the peer is a trusted proxy, the nearest address in
// X-Forwarded-For that is not one. ok is false for a request not over
// TCP.
func (s *Server) origin(r *http.Request) (addr, peer netip.Addr, ok bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, netip.Addr{}, false
	}
	peer = peerAddr(ap.Addr())
	if len(s.cfg.TrustedProxies) > 0 && s.trustedProxy(peer) {
		return s.forwardedFor(r.Header.Values("X-Forwarded-For"), peer), peer, true
	}
	return peer, peer, true
}

// forwardedClient is the address the access log gives as the client's
// when the request came through a trusted proxy (the remote address is
// then the proxy's): the one clientAddr keys the limits on, unmasked;
// "" when there is no such proxy or it names no other address.
func (s *Server) forwardedClient(r *http.Request) string {
	if len(s.cfg.TrustedProxies) == 0 {
		return "" // every request's path: no parsing for nothing
	}
	if addr, peer, ok := s.origin(r); ok && addr != peer {
		return addr.String()
	}
	return ""
}

// forwardedFor walks X-Forwarded-For from the nearest hop back, past the
// trusted proxies, and returns the first address that is not one; peer
// when the header names none or has a malformed hop.
func (s *Server) forwardedFor(values []string, peer netip.Addr) netip.Addr {
	for i := len(values) - 1; i >= 0; i-- {
		hops := strings.Split(values[i], ",")
		for j := len(hops) - 1; j >= 0; j-- {
			addr, ok := parseHop(strings.TrimSpace(hops[j]))
			if !ok {
				return peer
			}
			if !s.trustedProxy(addr) {
				return addr
			}
			peer = addr
		}
	}
	return peer
}

// parseHop reads one X-Forwarded-For entry: an address, with a port or
// in brackets as some proxies write it.
func parseHop(hop string) (netip.Addr, bool) {
	if addr, err := netip.ParseAddr(hop); err == nil {
		return addr.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(hop); err == nil {
		return ap.Addr().Unmap(), true
	}
	if addr, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(hop, "["), "]")); err == nil {
		return addr.Unmap(), true
	}
	return netip.Addr{}, false
}

func (s *Server) trustedProxy(addr netip.Addr) bool {
	return inPrefixes(s.cfg.TrustedProxies, addr)
}

// tokenBuckets is a token bucket per key, held in one map under one mutex:
// a lookup and a store per request, which costs far less than the rest of
// a request (see BenchmarkTokenBuckets). It is our own rather than
// golang.org/x/time/rate because what we need is the map around the
// buckets (keyed, bounded, forgetting idle keys), which that package does
// not have; a bucket alone is a few lines, kept here as a single time.
//
// A bucket is stored as the time it will be full again (the "theoretical
// arrival time" of GCRA): a key may spend burst tokens at once and regains
// one every interval. A bucket that is full again is the same as no bucket,
// so forgetting it loses nothing; that is how the map stays small.
type tokenBuckets[K comparable] struct {
	interval time.Duration // time to regain one token
	slack    time.Duration // (burst-1) intervals: how far ahead of now "full" may be while a token remains
	maxKeys  int

	mu      sync.Mutex
	full    map[K]time.Time
	sweepAt int // map size at which idle buckets are next dropped
	// nextRefill is when the first bucket of a map found full of live
	// ones refills: no sweep can free a place before.
	nextRefill time.Time
}

// maxBucketKeys bounds each limiter's map: at about 100 bytes a key, 10 MB.
const maxBucketKeys = 100_000

// newTokenBuckets makes buckets of burst tokens refilled at rate a second.
func newTokenBuckets[K comparable](rate float64, burst int, maxKeys int) *tokenBuckets[K] {
	interval := max(time.Duration(float64(time.Second)/rate), 1)
	// A burst so large that its time overflows is no limit at all.
	slack := min(float64(max(burst, 1)-1)*float64(interval), math.MaxInt64/2)
	return &tokenBuckets[K]{
		interval: interval,
		slack:    time.Duration(slack),
		maxKeys:  maxKeys,
		full:     make(map[K]time.Time),
		sweepAt:  min(1024, maxKeys),
	}
}

// take spends a token of key's bucket and answers 0, or, when the bucket
// is empty, spends nothing and answers how long until it holds a token.
func (b *tokenBuckets[K]) take(key K, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	full, ok := b.full[key]
	if !ok || full.Before(now) {
		full = now
	}
	if ahead := full.Sub(now); ahead > b.slack {
		return ahead - b.slack
	}
	b.put(key, full.Add(b.interval), ok, now)
	return 0
}

// left answers how many tokens key's bucket holds now, and when it holds
// none, how long until it does. It spends nothing, and remembers nothing
// of a key it does not know, so looking costs no memory.
func (b *tokenBuckets[K]) left(key K, now time.Time) (int, time.Duration) {
	b.mu.Lock()
	full, ok := b.full[key]
	b.mu.Unlock()
	debt := time.Duration(0)
	if ok && full.After(now) {
		debt = full.Sub(now)
	}
	if debt > b.slack {
		return 0, debt - b.slack
	}
	return int((b.slack-debt)/b.interval) + 1, 0
}

// spend takes a token from key's bucket even when it has none: the debt is
// repaid at the same rate, so however many attempts race past left, the
// long-run rate stays bounded. It reports whether this spend emptied the
// bucket, so the caller can say so once rather than at every refusal.
func (b *tokenBuckets[K]) spend(key K, now time.Time) (emptied bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	full, ok := b.full[key]
	if !ok || full.Before(now) {
		full = now
	}
	next := full.Add(b.interval)
	if !b.put(key, next, ok, now) {
		return false // untracked: the map is full of live buckets
	}
	return full.Sub(now) <= b.slack && next.Sub(now) > b.slack
}

// put stores key's bucket and reports whether it could. Before adding a
// key to a map that has grown to sweepAt, it drops the buckets that are
// full again, which are the same as no bucket; the work is amortised over
// the keys added since the last sweep. A map still full of live buckets
// (a flood of distinct keys) takes no new key: forgetting a live bucket
// would lift its limit, a lock by the failed-authentication throttle
// among them, so the newcomer goes untracked instead.
func (b *tokenBuckets[K]) put(key K, full time.Time, known bool, now time.Time) bool {
	if !known && len(b.full) >= b.sweepAt {
		// Full of live buckets, no sweep can free a place before the
		// first of them refills: each newcomer then costs a comparison,
		// not a sweep.
		if len(b.full) >= b.maxKeys && now.Before(b.nextRefill) {
			return false
		}
		b.nextRefill = time.Time{}
		for k, f := range b.full {
			if !f.After(now) {
				delete(b.full, k)
			} else if b.nextRefill.IsZero() || f.Before(b.nextRefill) {
				b.nextRefill = f
			}
		}
		b.sweepAt = min(max(1024, 2*len(b.full)), b.maxKeys)
		if len(b.full) >= b.maxKeys {
			return false
		}
	}
	b.full[key] = full
	return true
}

// size is how many keys are held, for tests.
func (b *tokenBuckets[K]) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.full)
}
