package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plantstore/plantstore"
)

// DispatcherConfig wires a Dispatcher. Store and Client are required.
type DispatcherConfig struct {
	Store  plantstore.WebhookStore
	Client *http.Client // from NewClient
	// Schedule of retries; the zero value is DefaultSchedule.
	Schedule Schedule
	Log      *slog.Logger
	// Workers bounds how many subscribers are served at once, each by one
	// goroutine; default 16. A slow subscriber holds one worker, never the
	// others.
	Workers int
	// Poll is how often the store is asked for due deliveries when nothing
	// wakes the dispatcher sooner; default 1 s. With several instances it
	// bounds how soon one instance sends what another enqueued.
	Poll time.Duration
	// Lease is how long a claimed subscriber stays this dispatcher's
	// without renewal; default 30 s, and at least three times AttemptTimeout.
	// A crashed instance's subscribers are taken over when it runs out.
	Lease time.Duration
	// AttemptTimeout is the client's timeout, used to size the lease;
	// default 10 s.
	AttemptTimeout time.Duration
	// Wake, when it delivers, makes the dispatcher look for due deliveries
	// at once (the store signals it after a create enqueued some).
	Wake <-chan struct{}
	Now  func() time.Time
}

// Dispatcher sends the outbox's deliveries in the background, at least
// once: a delivery is deleted only after a 2xx, recorded after the answer,
// so a crash between the two sends it again. Each subscriber's deliveries
// go one at a time, oldest first; a failed one is retried per the
// schedule, and the ones behind it wait, so they arrive in creation order
// even across an outage. Once the schedule gives up on it, it is marked
// failed and the next one goes.
type Dispatcher struct {
	cfg   DispatcherConfig
	owner string
	stats stats
}

// batchSize bounds the deliveries read at once for one subscriber.
const batchSize = 32

// minClaimInterval spaces the dispatcher's claims.
const minClaimInterval = 10 * time.Millisecond

type stats struct {
	attempts, delivered, retried, failed, disabled atomic.Int64
}

// Stats counts what this process's dispatcher did since it started.
type Stats struct {
	// Attempts made; of them Delivered succeeded, Retried failed and were
	// scheduled again, Failed failed for good (the schedule gave up).
	Attempts, Delivered, Retried, Failed int64
	// Disabled counts subscribers disabled because they answered 410.
	Disabled int64
}

// NewDispatcher checks cfg and fills in its defaults.
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	if cfg.Store == nil || cfg.Client == nil {
		return nil, errors.New("webhook dispatcher: a store and a client are required")
	}
	if len(cfg.Schedule.Intervals) == 0 {
		cfg.Schedule.Intervals = DefaultSchedule.Intervals
	}
	if cfg.Schedule.MaxAge <= 0 {
		cfg.Schedule.MaxAge = DefaultSchedule.MaxAge
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 16
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = defaultTimeout
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	cfg.Lease = max(cfg.Lease, 3*cfg.AttemptTimeout)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Dispatcher{cfg: cfg, owner: newOwner()}, nil
}

// newOwner names this process in leases: host, pid and a random part, so a
// restarted process never mistakes its predecessor's leases for its own.
func newOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Stats returns the counters.
func (d *Dispatcher) Stats() Stats {
	return Stats{
		Attempts:  d.stats.attempts.Load(),
		Delivered: d.stats.delivered.Load(),
		Retried:   d.stats.retried.Load(),
		Failed:    d.stats.failed.Load(),
		Disabled:  d.stats.disabled.Load(),
	}
}

// Run sends deliveries until ctx ends. Then it stops claiming, lets the
// attempts in flight finish (each is bounded by the client's timeout),
// records them, releases its leases, and returns.
func (d *Dispatcher) Run(ctx context.Context) {
	slots := make(chan struct{}, d.cfg.Workers)
	finished := make(chan struct{}, d.cfg.Workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	ticker := time.NewTicker(d.cfg.Poll)
	defer ticker.Stop()
	var lastClaim time.Time
	for {
		// Under a stream of creates the wakes come faster than claims are
		// useful (a claimed subscriber's worker picks up its new
		// deliveries itself); space the claims, which are writes.
		if wait := minClaimInterval - time.Since(lastClaim); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		lastClaim = time.Now()
		if free := d.cfg.Workers - len(slots); free > 0 {
			subs, err := d.cfg.Store.ClaimSubscribers(ctx, d.owner, d.cfg.Lease, free)
			if err != nil && ctx.Err() == nil {
				d.cfg.Log.Warn("webhook claim failed", "error", err)
			}
			for _, sub := range subs {
				slots <- struct{}{}
				wg.Go(func() {
					defer func() {
						<-slots
						finished <- struct{}{}
					}()
					d.serveSubscriber(ctx, sub)
				})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-d.cfg.Wake:
		case <-finished:
		}
	}
}

// serveSubscriber sends a claimed subscriber's due deliveries in order
// until none is due, one fails, or ctx ends, then gives the lease back.
func (d *Dispatcher) serveSubscriber(ctx context.Context, sub plantstore.Subscriber) {
	log := d.cfg.Log.With("subscriber", sub.ID, "url", RedactURL(sub.URL))
	// Bookkeeping outlives ctx: what was attempted is recorded even when the
	// process is stopping.
	record := func(results []plantstore.AttemptResult, release bool) bool {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		held, err := d.cfg.Store.RecordAttempts(rctx, d.owner, sub.ID, results, d.cfg.Lease, release)
		if err != nil {
			log.Error("webhook attempts not recorded; they will be made again", "error", err)
			return false
		}
		if !held && !release {
			log.Warn("webhook lease lost to another instance")
		}
		return held
	}
	key, err := ParseSecret(sub.Secret)
	if err != nil {
		d.disable(ctx, log, sub.ID, "its signing secret is unusable: "+err.Error())
		return
	}
	for {
		ds, err := d.cfg.Store.DueDeliveries(ctx, sub.ID, batchSize)
		if err != nil || len(ds) == 0 {
			if err != nil && ctx.Err() == nil {
				log.Warn("webhook deliveries not read", "error", err)
			}
			record(nil, true)
			return
		}
		var results []plantstore.AttemptResult
		renewed := d.cfg.Now()
		stop := false
		for _, dl := range ds {
			if ctx.Err() != nil {
				stop = true
				break
			}
			r, outcome := d.attempt(ctx, log, sub, key, dl)
			if outcome != Delivered && ctx.Err() != nil {
				stop = true // cut short by the shutdown: not the subscriber's failure
				break
			}
			if outcome == Gone {
				// Keep the lease until the subscriber is disabled (which
				// frees it), or another worker could claim it in between.
				record(results, false)
				d.disable(ctx, log, sub.ID, fmt.Sprintf("410 Gone on event %s", dl.EventID))
				return
			}
			results = append(results, r)
			if !r.Delivered && !r.GiveUp {
				stop = true // the rest wait behind it, in order
				break
			}
			// Renew well before the lease could run out under slow attempts.
			if d.cfg.Now().Sub(renewed) > d.cfg.Lease/3 {
				if !record(results, false) {
					return
				}
				results, renewed = nil, d.cfg.Now()
			}
		}
		if !record(results, stop) || stop {
			return
		}
	}
}

// attempt sends one delivery and says what to record.
func (d *Dispatcher) attempt(ctx context.Context, log *slog.Logger, sub plantstore.Subscriber, key []byte, dl plantstore.Delivery) (plantstore.AttemptResult, Outcome) {
	start := d.cfg.Now()
	res := Send(ctx, d.cfg.Client, Message{ID: dl.EventID, URL: sub.URL, Key: key, Body: EventBody(dl.Plant)}, start)
	if res.Outcome != Delivered && ctx.Err() != nil {
		// Cut short by the shutdown: not the subscriber's failure, and not
		// recorded; the delivery goes out again after the restart.
		log.Info("webhook attempt cut short by shutdown", "event", dl.EventID, "plant", dl.Plant.ID)
		return plantstore.AttemptResult{DeliveryID: dl.ID}, Retry
	}
	d.stats.attempts.Add(1)
	attrs := []any{"event", dl.EventID, "plant", dl.Plant.ID, "attempt", dl.Attempts + 1,
		"status", res.Status, "outcome", res.Outcome.String(),
		"duration_ms", float64(d.cfg.Now().Sub(start).Microseconds()) / 1000}
	r := plantstore.AttemptResult{DeliveryID: dl.ID, Status: res.Status}
	switch res.Outcome {
	case Delivered:
		d.stats.delivered.Add(1)
		r.Delivered = true
		log.Info("webhook delivered", attrs...)
	case Gone:
		log.Warn("webhook subscriber answered 410 Gone; disabling it", attrs...)
	default:
		r.Error = attemptError(res)
		r.NextAttempt, r.GiveUp = d.cfg.Schedule.Next(dl.Attempts+1, dl.CreatedAt, d.cfg.Now(), res.RetryAfter, nil)
		attrs = append(attrs, "error", r.Error)
		if r.GiveUp {
			d.stats.failed.Add(1)
			log.Error("webhook delivery failed for good", attrs...)
		} else {
			d.stats.retried.Add(1)
			log.Warn("webhook attempt failed", append(attrs, "next_attempt", r.NextAttempt.UTC().Format(time.RFC3339))...)
		}
	}
	return r, res.Outcome
}

func (d *Dispatcher) disable(ctx context.Context, log *slog.Logger, id int64, reason string) {
	d.stats.disabled.Add(1)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := d.cfg.Store.DisableSubscriber(dctx, id, reason); err != nil {
		log.Error("webhook subscriber not disabled", "reason", reason, "error", err)
		return
	}
	log.Warn("webhook subscriber disabled; its pending deliveries are failed", "reason", reason)
}

// attemptError is the reason kept with a failed attempt: the status line,
// or what went wrong when there was no answer.
func attemptError(res Result) string {
	switch {
	case res.Err != nil && res.Status == 0:
		return res.Err.Error()
	case res.Status != 0:
		return fmt.Sprintf("%d %s", res.Status, http.StatusText(res.Status))
	}
	return "failed"
}

// EventBody is the body of a new-plant event: the NewPlant the API
// accepted, {"id", "name", "tag"?}, encoded from the plant as committed.
func EventBody(p plantstore.Plant) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // JSON for a program, not for a page
	err := enc.Encode(struct {
		ID   int64   `json:"id"`
		Name string  `json:"name"`
		Tag  *string `json:"tag,omitempty"`
	}{p.ID, p.Name, p.Tag})
	if err != nil {
		panic(err) // an int64 and two valid strings always encode
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
