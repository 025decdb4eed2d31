package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Message is one delivery to one subscriber, as the outbox holds it. ID is
// the webhook-id, the same on every attempt, so a subscriber can drop
// duplicates; Body is sent and signed byte for byte.
type Message struct {
	ID   string
	URL  string
	Key  []byte // from ParseSecret
	Body []byte
	// Type and Seq, when set, go in the plantstore-event-type and
	// plantstore-event-id headers: the event's type and its id in the
	// change feed, by which receivers order a plant's events. Headers are
	// not signed; the bodies that need them carry them too (DeliveryBody).
	Type string
	Seq  int64
}

// The headers that say which event a delivery carries.
const (
	HeaderEventType = "plantstore-event-type"
	HeaderEventID   = "plantstore-event-id"
)

// Outcome is what the dispatcher should do after an attempt.
type Outcome int

const (
	// Retry: the message was not delivered; try again per the Schedule. It
	// is the zero value so that a forgotten or partial Result is never
	// taken for a delivery.
	Retry Outcome = iota
	// Delivered: the subscriber answered 2xx; the message is done.
	Delivered
	// Gone: the subscriber answered 410, which the specification reserves
	// for "stop sending": disable the subscription rather than retry.
	Gone
)

// String names the outcome for logs.
func (o Outcome) String() string {
	switch o {
	case Retry:
		return "retry"
	case Delivered:
		return "delivered"
	case Gone:
		return "gone"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Result is what one attempt learned, for the dispatcher to act on and record.
type Result struct {
	Outcome Outcome
	// Status is the answer's HTTP status, 0 when there was no answer.
	Status int
	// RetryAfter is the wait the answer asked for in Retry-After (seconds
	// or an HTTP-date), uncapped; 0 if absent, invalid or in the past.
	// Schedule.Next caps it.
	RetryAfter time.Duration
	// Err says why the attempt failed, nil when Delivered. It is short and
	// safe to log: it holds neither the key nor the URL (whose query may
	// carry the subscriber's token). errors.Is finds ErrForbiddenAddress,
	// context.Canceled and context.DeadlineExceeded through it.
	Err error
}

// Send makes one delivery attempt: it POSTs m.Body to m.URL, signed with
// m.Key and timestamped now, and classifies the answer. Use a client from
// NewClient: its timeout bounds the attempt and it refuses internal
// addresses; cancelling ctx aborts the attempt too. Send never retries and
// never follows a redirect; at most 64 KiB of the answer's body is read,
// and then discarded.
//
// It goes to the client's transport directly, not through Client.Do,
// whose redirect and cookie handling it never wants (the client follows
// no redirect either) and which costs each delivery a few microseconds
// more: a server delivering to a subscriber that keeps up spends about
// as much CPU on its deliveries as on its creates (BENCHMARKS.md). The
// client's Timeout bounds the attempt as Do would, from the request to
// the end of the answer.
func Send(ctx context.Context, c *http.Client, m Message, now time.Time) Result {
	if len(m.Key) == 0 {
		// An empty HMAC key still yields a signature, one anybody can forge.
		return Result{Outcome: Retry, Err: fmt.Errorf("send webhook %s: no signing key", m.ID)}
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL, bytes.NewReader(m.Body))
	if err != nil {
		return Result{Outcome: Retry, Err: fmt.Errorf("send webhook %s: %w", m.ID, withoutURL(err))}
	}
	h := Headers(m.Key, m.ID, now, m.Body)
	// Canonical keys, set directly: what Header.Set would make of them.
	h["User-Agent"] = []string{userAgent}
	if m.Type != "" {
		h[canonicalEventType] = []string{m.Type}
	}
	if m.Seq > 0 {
		h[canonicalEventID] = []string{strconv.FormatInt(m.Seq, 10)}
	}
	req.Header = h

	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		// As Client.Do says it: the method, then what went wrong.
		return Result{Outcome: Retry, Err: fmt.Errorf("send webhook %s: Post: %w", m.ID, withoutURL(err))}
	}
	// Read a little so a small answer leaves the connection reusable, but
	// never let a subscriber make us read without end.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
	resp.Body.Close()

	r := Result{Status: resp.StatusCode}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode <= 299:
		r.Outcome = Delivered
		return r
	case resp.StatusCode == http.StatusGone:
		r.Outcome = Gone
		r.Err = fmt.Errorf("send webhook %s: subscriber answered 410 Gone", m.ID)
		return r
	case resp.StatusCode >= 300 && resp.StatusCode <= 399:
		r.Err = fmt.Errorf("send webhook %s: subscriber answered %d; redirects are not followed", m.ID, resp.StatusCode)
	default:
		r.Err = fmt.Errorf("send webhook %s: subscriber answered %d", m.ID, resp.StatusCode)
	}
	r.Outcome = Retry
	r.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now)
	return r
}

// withoutURL drops the *url.Error layer, which repeats the whole URL,
// keeping what it wraps (and so errors.Is on it).
func withoutURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// parseRetryAfter reads a Retry-After value (RFC 9110 section 10.2.3):
// delay-seconds or an HTTP-date, measured from now. Anything else, and any
// time not after now, is 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > math.MaxInt64/int64(time.Second) {
			return math.MaxInt64
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
