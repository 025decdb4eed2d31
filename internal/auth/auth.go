// Package auth checks bearer tokens against the token store. It keeps
// recently seen tokens in memory for a short time, so a request costs no
// database read, and records last use in batches, so a request costs no
// write either.
package auth

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/faultlog"
)

// Options tune an Authenticator. The zero value is usable.
type Options struct {
	// CacheTTL bounds how long a token stays valid in memory after its last
	// lookup: the longest a revocation can take to bite. Default 2 s.
	CacheTTL time.Duration
	// CacheSize bounds the entries kept. Default 10,000.
	CacheSize int
	// FlushInterval is how often last-use times are written. Default 5 s.
	FlushInterval time.Duration
	// RosterInterval is how often the roster of active tokens' hashes
	// (Known) is read again. Default 5 s.
	RosterInterval time.Duration
	// RosterSize bounds the hashes in the roster. Default 100,000.
	RosterSize int
	Now        func() time.Time
	Logger     *slog.Logger
}

// Authenticator turns a presented token into the token record it stands for.
type Authenticator struct {
	store plantstore.TokenStore
	opts  Options

	mu    sync.Mutex
	cache map[plantstore.TokenHash]cached
	used  map[int64]time.Time

	// roster holds the hashes of the active tokens as of its last reading
	// (RefreshRoster): nil until the first.
	roster atomic.Pointer[map[plantstore.TokenHash]struct{}]
	// rosterRead is when the roster was last read, or tried, in Unix
	// nanoseconds: 0 before the first.
	rosterRead atomic.Int64

	hits, misses atomic.Int64

	// The periodic reads and writes retry on their own: an outage of the
	// store is said once a minute, not at every tick.
	rosterFaults, flushFaults *faultlog.Task
}

// CacheStats count well-formed tokens answered from memory (hits) and
// looked up in the store (misses), since the Authenticator was made.
type CacheStats struct{ Hits, Misses int64 }

// Stats returns the cache's counts, for metrics.
func (a *Authenticator) Stats() CacheStats {
	return CacheStats{Hits: a.hits.Load(), Misses: a.misses.Load()}
}

type cached struct {
	hash    plantstore.TokenHash
	token   plantstore.Token
	expires time.Time
}

// New returns an Authenticator over store.
func New(store plantstore.TokenStore, opts Options) *Authenticator {
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = 2 * time.Second
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = 10_000
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = 5 * time.Second
	}
	if opts.RosterInterval <= 0 {
		opts.RosterInterval = 5 * time.Second
	}
	if opts.RosterSize <= 0 {
		opts.RosterSize = 100_000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Authenticator{
		store:        store,
		opts:         opts,
		cache:        make(map[plantstore.TokenHash]cached),
		used:         make(map[int64]time.Time),
		rosterFaults: &faultlog.Task{Log: opts.Logger, Msg: "read the roster of active tokens"},
		flushFaults:  &faultlog.Task{Log: opts.Logger, Msg: "record token use"},
	}
}

// Authenticate returns the active token that secret stands for. It returns
// EUNAUTHORIZED for a malformed, unknown or revoked token, and the store's
// EUNAVAILABLE when the store cannot be asked.
func (a *Authenticator) Authenticate(ctx context.Context, secret string) (plantstore.Token, error) {
	return a.Lookup(ctx, a.Hash(secret))
}

// Hash returns the hash under which Cached, Known and Lookup find secret,
// so a request that asks all three hashes its token once. A malformed
// token is not hashed: its hash is the zero TokenHash, which no token has
// (it would take a preimage of SHA-256), and which they all refuse
// without asking the store.
func (a *Authenticator) Hash(secret string) plantstore.TokenHash {
	if !plantstore.WellFormedToken(secret) {
		return plantstore.TokenHash{}
	}
	// Only SHA-256 digests of the secret are ever compared (here and in the
	// store's index), so the timing of a comparison tells an attacker nothing
	// about the secret; the checks below are constant-time all the same.
	return plantstore.HashToken(secret)
}

// Lookup is Authenticate for the token of hash, from Hash: from the cache
// when it can (another request may have filled it since the caller's
// Cached), else from the store.
func (a *Authenticator) Lookup(ctx context.Context, hash plantstore.TokenHash) (plantstore.Token, error) {
	if hash == (plantstore.TokenHash{}) {
		return plantstore.Token{}, plantstore.Errorf(plantstore.EUNAUTHORIZED, "the access token is malformed")
	}
	now := a.opts.Now()
	if token, ok := a.cached(hash, now); ok {
		return token, nil
	}
	a.misses.Add(1)

	token, err := a.store.TokenByHash(ctx, hash)
	if plantstore.ErrorCode(err) == plantstore.ENOTFOUND {
		a.mu.Lock()
		delete(a.cache, hash)
		a.mu.Unlock()
		return plantstore.Token{}, plantstore.Errorf(plantstore.EUNAUTHORIZED, "the access token is unknown or revoked")
	}
	if err != nil {
		return plantstore.Token{}, err
	}
	a.mu.Lock()
	if len(a.cache) >= a.opts.CacheSize {
		a.evictLocked(now)
	}
	a.cache[hash] = cached{hash: hash, token: token, expires: now.Add(a.opts.CacheTTL)}
	a.used[token.ID] = now
	a.mu.Unlock()
	return token, nil
}

// Cached returns the active token of hash, from Hash, when this process
// has checked it within the cache's time to live, as Lookup would without
// asking the store; false when only the store could tell (or the token is
// malformed).
func (a *Authenticator) Cached(hash plantstore.TokenHash) (plantstore.Token, bool) {
	if hash == (plantstore.TokenHash{}) {
		return plantstore.Token{}, false
	}
	return a.cached(hash, a.opts.Now())
}

// cached looks hash up in the cache, noting the last use of a hit: one
// critical section a request.
func (a *Authenticator) cached(hash plantstore.TokenHash, now time.Time) (plantstore.Token, bool) {
	a.mu.Lock()
	entry, ok := a.cache[hash]
	hit := ok && now.Before(entry.expires) && subtle.ConstantTimeCompare(entry.hash[:], hash[:]) == 1
	if hit {
		a.used[entry.token.ID] = now
	}
	a.mu.Unlock()
	if !hit {
		return plantstore.Token{}, false
	}
	a.hits.Add(1)
	return entry.token, true
}

// Known reports whether the token of hash, from Hash, is one this
// process knows to be valid, or to have been: on the roster of active
// tokens as last read (RefreshRoster), or in the cache, fresh or stale.
// It is no authentication (the token may have been revoked since; Lookup
// decides), only a reason to let its lookup through while the client's
// address is throttled for failed authentications: a stranger's guesses
// are never known, so the throttle still answers them without a lookup,
// while a valid token new to this process waits at most for the roster's
// next reading, however fast the guesses come.
func (a *Authenticator) Known(hash plantstore.TokenHash) bool {
	if hash == (plantstore.TokenHash{}) {
		return false
	}
	if roster := a.roster.Load(); roster != nil {
		// A map finds the hash by its bytes; being SHA-256 digests, their
		// timing tells nothing of a secret.
		if _, ok := (*roster)[hash]; ok {
			return true
		}
	}
	a.mu.Lock()
	entry, ok := a.cache[hash]
	a.mu.Unlock()
	return ok && subtle.ConstantTimeCompare(entry.hash[:], hash[:]) == 1
}

// RefreshRoster reads the hashes of the active tokens (RosterSize of them
// at most, the newest first) for Known. On an error the roster read last
// stays.
func (a *Authenticator) RefreshRoster(ctx context.Context) error {
	a.rosterRead.Store(time.Now().UnixNano())
	hashes, err := a.store.ActiveTokenHashes(ctx, a.opts.RosterSize)
	if err != nil {
		return err
	}
	roster := make(map[plantstore.TokenHash]struct{}, len(hashes))
	for _, h := range hashes {
		roster[h] = struct{}{}
	}
	a.roster.Store(&roster)
	return nil
}

// RosterDue is how long after now the roster is read next (at most
// RosterInterval): by then a token valid now is Known. The throttle tells
// a client refused for want of it to retry then, not after the whole of
// its address's back-off.
func (a *Authenticator) RosterDue(now time.Time) time.Duration {
	read := a.rosterRead.Load()
	if read == 0 {
		return a.opts.RosterInterval
	}
	due := time.Unix(0, read).Add(a.opts.RosterInterval).Sub(now)
	return min(max(due, 0), a.opts.RosterInterval)
}

// evictLocked drops expired entries, and if none were, an arbitrary one.
func (a *Authenticator) evictLocked(now time.Time) {
	n := len(a.cache)
	for h, e := range a.cache {
		if !now.Before(e.expires) {
			delete(a.cache, h)
		}
	}
	if len(a.cache) < n {
		return
	}
	for h := range a.cache {
		delete(a.cache, h)
		return
	}
}

// Flush writes the last-use times gathered since the previous flush.
func (a *Authenticator) Flush(ctx context.Context) error {
	a.mu.Lock()
	used := a.used
	a.used = make(map[int64]time.Time)
	a.mu.Unlock()
	if len(used) == 0 {
		return nil
	}
	if err := a.store.RecordTokenUse(ctx, used); err != nil {
		// Keep them for the next flush; a later use wins over an older one.
		a.mu.Lock()
		for id, at := range used {
			if cur, ok := a.used[id]; !ok || at.After(cur) {
				a.used[id] = at
			}
		}
		a.mu.Unlock()
		return err
	}
	return nil
}

// Run reads the roster of active tokens every RosterInterval (read it
// first with RefreshRoster), and flushes last-use times every
// FlushInterval until ctx ends, then once more, so a graceful shutdown
// loses none.
func (a *Authenticator) Run(ctx context.Context) {
	ticker := time.NewTicker(a.opts.FlushInterval)
	defer ticker.Stop()
	rosterTicker := time.NewTicker(a.opts.RosterInterval)
	defer rosterTicker.Stop()
	for {
		select {
		case <-rosterTicker.C:
			switch err := a.RefreshRoster(ctx); {
			case err == nil:
				a.rosterFaults.Worked()
			case ctx.Err() == nil:
				a.rosterFaults.Failed(err)
			}
		case <-ticker.C:
			if err := a.Flush(ctx); err != nil {
				a.flushFaults.Failed(err)
			} else {
				a.flushFaults.Worked()
			}
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := a.Flush(final); err != nil {
				a.opts.Logger.Warn("record token use", "err", err)
			}
			cancel()
			return
		}
	}
}
