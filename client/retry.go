package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RetryPolicy says which failed requests the client retries and how long
// it waits before each retry. The zero value retries nothing.
//
// Retried, when Max allows: an answer 429 Too Many Requests or 503
// Service Unavailable (the service refused it for now: a limit, or the
// store busy), and a connection that dropped before the whole answer came
// (reset, or closed by the server or a proxy). Never retried: other
// answers, a connection that could not be made at all (a wrong address
// fails at once, and so does a server that is restarting and refuses
// connections), a timeout of the *http.Client, and a cancelled ctx.
// (Go's net/http itself sends a GET again, once, when a kept-alive
// connection turns out closed before any answer: retries or not.)
// Every request this client makes may be repeated: GET, PUT and DELETE
// are idempotent, and so is Create, as the service answers the same
// create again as a replay (200, nothing changed). One consequence: when
// an attempt took effect but its answer was lost, the retry reports what
// it finds: a Delete or DeleteIf 404, an UpdateIf 412, a Create 409 if
// another client changed the plant in between.
// Error.EarlierMayHaveTakenEffect says whether an earlier attempt may have
// done it.
type RetryPolicy struct {
	// Max is how many times a request is retried after its first attempt.
	Max int
	// BaseDelay is the wait before the first retry when the service gave
	// no Retry-After; it doubles at each retry, up to MaxDelay, and each
	// wait is drawn at random between half of it and all of it, so that
	// clients failed together do not come back together. Default 250 ms.
	BaseDelay time.Duration
	// MaxDelay caps each wait (default 10 s). An answer whose Retry-After
	// asks for longer is not waited for: it is returned at once, with its
	// RetryAfter, for the caller to decide.
	MaxDelay time.Duration
}

// WithRetries retries a request up to n times, as RetryPolicy describes,
// with its default delays. The client does not retry unless told to: a
// library that multiplies requests and stretches calls by seconds behind
// its caller's back surprises callers that retry themselves or answer a
// user waiting, and a cancelled ctx or its deadline bound the retries
// only if the caller set them. The plantstore command line uses 3.
func WithRetries(n int) Option { return WithRetryPolicy(RetryPolicy{Max: n}) }

// WithRetryPolicy sets how the client retries, delays included.
func WithRetryPolicy(p RetryPolicy) Option {
	if p.BaseDelay <= 0 {
		p.BaseDelay = 250 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 10 * time.Second
	}
	return func(c *Client) { c.retry = p }
}

// RetryAfter returns the Retry-After of an *Error in err's chain: how
// long the service asked the client to wait before trying again; 0 when
// there is none.
func RetryAfter(err error) time.Duration {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.RetryAfter
	}
	return 0
}

// send makes the request, and again as c.retry allows.
func (c *Client) send(ctx context.Context, r request) error {
	unsure := false // an earlier attempt may have taken effect
	for retry := 0; ; retry++ {
		err := c.sendOnce(ctx, r)
		e, answered := errors.AsType[*Error](err)
		if answered {
			e.EarlierMayHaveTakenEffect = unsure
		}
		if err == nil || retry >= c.retry.Max || !retryable(r, err) {
			return err
		}
		unsure = unsure || !answered || e.StatusCode == http.StatusServiceUnavailable
		wait, ok := c.retry.wait(retry, RetryAfter(err))
		if !ok {
			return err // the service asks for longer than we wait
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return err // the retry could not finish in time anyway
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("plantstore: %w while waiting to retry; the last attempt: %w", ctx.Err(), err)
		case <-timer.C:
		}
	}
}

// retryable says whether an attempt's error is worth another: a 429
// (refused before anything was done), or, for a request that may be
// repeated, a 503 (which a write may follow after it took effect) or a
// connection lost before the whole answer.
func retryable(r request, err error) bool {
	e, answered := errors.AsType[*Error](err)
	switch {
	case answered && e.StatusCode == http.StatusTooManyRequests:
		return true
	case r.method == http.MethodPost && !r.replay:
		return false
	case answered:
		return e.StatusCode == http.StatusServiceUnavailable
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}

// wait is the delay before retry number retry+1: at least retryAfter when
// the service gave one (up to a quarter more, spread at random), else the
// jittered exponential backoff. ok is false when retryAfter exceeds
// MaxDelay.
//
// No sum or shift here may overflow, whatever the policy and however many
// retries: BaseDelay<<retry wraps negative (a minute at the 28th retry),
// and a negative wait made between panic. So the backoff doubles only
// while it stays within MaxDelay, tested by shifting MaxDelay down, which
// cannot overflow (BaseDelay<<retry <= MaxDelay exactly when BaseDelay <=
// MaxDelay>>retry), and is MaxDelay from then on.
func (p RetryPolicy) wait(retry int, retryAfter time.Duration) (d time.Duration, ok bool) {
	if retryAfter > 0 {
		if retryAfter > p.MaxDelay {
			return 0, false
		}
		// retryAfter <= MaxDelay, so MaxDelay-retryAfter cannot overflow.
		return between(retryAfter, retryAfter+min(retryAfter/4, p.MaxDelay-retryAfter)), true
	}
	d = p.MaxDelay
	if retry < 63 && p.BaseDelay <= p.MaxDelay>>retry {
		d = p.BaseDelay << retry // at most MaxDelay: no overflow
	}
	return between(d/2, d), true
}

// between draws a wait at random from low to high, both included: the
// spread of every wait the client chooses (retries here, an event
// follower's reconnections in events.go), so that clients that failed
// together do not come back together.
func between(low, high time.Duration) time.Duration {
	return low + rand.N(high-low+1)
}

// retryAfter reads an answer's Retry-After (RFC 9110, section 10.2.3):
// seconds, or an HTTP-date measured from now; 0 when absent, malformed or
// past.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	secs, err := strconv.ParseInt(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) && v[0] != '-' {
		// Digits past int64: a valid delay (RFC 9110, section 10.2.3),
		// and a long one.
		secs, err = math.MaxInt64, nil
	}
	if err == nil {
		return time.Duration(min(max(secs, 0), math.MaxInt64/int64(time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
