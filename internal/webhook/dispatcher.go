package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/faultlog"
)

// DispatcherConfig wires a Dispatcher. Store and Client are required.
type DispatcherConfig struct {
	Store  plantstore.WebhookStore
	Client *http.Client // from NewClient
	// Schedule of retries; the zero value is DefaultSchedule.
	Schedule Schedule
	Log      *slog.Logger
	// Workers bounds how many subscribers are served at once; default 16.
	// A slow subscriber holds one worker, never the others.
	Workers int
	// Concurrency bounds the attempts in flight to one subscriber; default
	// 64. The events of one plant go one after another, in order; those of
	// different plants go side by side, and a slow attempt keeps one
	// sender, not the others.
	Concurrency int
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
	// Busy, when set, says whether clients' requests keep the server
	// saturated. While it does, deliveries wait, so that the server spends
	// its CPU on the requests clients wait for rather than on their
	// notifications; a subscriber waits MaxDefer at most, then gets a
	// window of Concurrency deliveries, so deliveries go on under any
	// load, slower.
	Busy func() bool
	// MaxDefer bounds the wait for Busy; default 1 s.
	MaxDefer time.Duration
}

// Dispatcher sends the outbox's deliveries in the background, at least
// once: a delivery is deleted only after a 2xx, recorded after the answer,
// so a crash between the two sends it again. A subscriber's deliveries go
// out up to Concurrency at a time, but the events of one plant one after
// another, oldest first: a failed one is retried per the schedule, and its
// plant's later events wait behind it, so a plant's events arrive in the
// order they were recorded even across an outage, while the other plants'
// go on. Once the schedule gives up on one, it is parked and its plant's
// next event goes.
//
// A receiver that is down (attempts refused, timed out, or answered 5xx,
// 429 or 408, downAfter in a row) is not sent its backlog: the
// subscriber is paused (PauseSubscriber) until the earliest retry of the
// attempts that failed, and then probed, one plant at a time, until an
// attempt shows the receiver up (any other answer); the backlog then goes
// at full speed. Attempts at a receiver that cannot answer would take the
// workers, the CPU and each delivery's retries, and park the deliveries
// after --webhook-park-after; paused, they wait for it, however long it
// is down, with only the probes' deliveries tried and, in time, parked.
//
// A worker serving a subscriber keeps its Concurrency senders busy: it
// reads due deliveries again whenever a sender would idle, not once a
// whole read was sent, so a slow attempt holds up its own plant's later
// events only, not the others' nor the retries falling due. Before each
// read it records every result that came back (in one transaction, which
// renews its lease), and it drops from the answer the deliveries of
// plants still in flight: so no delivery is sent while an earlier one of
// its plant is in flight or failed unrecorded (serveSubscriber).
type Dispatcher struct {
	cfg     DispatcherConfig
	owner   string
	stats   stats
	retries retryTimes
	// slots holds a token for each worker serving a subscriber.
	slots chan struct{}
	// health is what this dispatcher learnt of each subscriber's
	// receiver, across turns.
	healthMu sync.Mutex
	health   map[int64]receiverHealth
}

// receiverHealth is what attempts said of a subscriber's receiver.
type receiverHealth struct {
	// downRun counts the failures in a row that say it is down, across
	// turns: when events come one at a time, each turn makes an attempt
	// or two, and the run crosses them.
	downRun int
	// paused: this dispatcher paused it, and no probe has found it up
	// since: then what failed while it was down goes at once (RetryNow).
	// Not so for a receiver that refuses some events and is never
	// paused: their retries keep to the schedule.
	paused bool
}

// updateHealth changes the subscriber id's health with change, and
// returns it as it was and as it is.
func (d *Dispatcher) updateHealth(id int64, change func(*receiverHealth)) (was, is receiverHealth) {
	d.healthMu.Lock()
	defer d.healthMu.Unlock()
	was = d.health[id]
	is = was
	change(&is)
	if is == (receiverHealth{}) {
		delete(d.health, id)
	} else {
		d.health[id] = is
	}
	return was, is
}

// othersMayWait says whether a subscriber may be waiting for a worker:
// every worker is busy, so Run claims none. With a worker free, any
// subscriber due is claimed by it at the next claim, and a turn that ends
// goes on (maxTurn).
func (d *Dispatcher) othersMayWait() bool { return len(d.slots) == cap(d.slots) }

// retryTimes holds when the retries this dispatcher scheduled fall due,
// so that Run claims then rather than at its next poll: a retry's wait
// keeps to the schedule's ±20%, not stretched by up to a poll interval
// (--webhook-poll). It keeps the earliest maxTrackedRetries; any later
// ones, and those another instance scheduled, the poll finds.
type retryTimes struct {
	mu    sync.Mutex
	times []time.Time // ascending
}

const maxTrackedRetries = 256

func (r *retryTimes) add(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearchFunc(r.times, t, time.Time.Compare)
	if i < maxTrackedRetries {
		r.times = slices.Insert(r.times, i, t)
		r.times = r.times[:min(len(r.times), maxTrackedRetries)]
	}
}

// next forgets the times up to claimed, when a claim found what fell due
// by then (none, for a zero claimed: no claim was made, or it failed, and
// the retries due wait for the next), and returns the earliest one left.
func (r *retryTimes) next(claimed time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := 0
	for i < len(r.times) && !r.times[i].After(claimed) {
		i++
	}
	r.times = slices.Delete(r.times, 0, i)
	if len(r.times) == 0 {
		return time.Time{}, false
	}
	return r.times[0], true
}

// windowPerSlot sizes the window of deliveries read at once for one
// subscriber: so many per attempt in flight, so that a backlog is read
// (and its results recorded) in a few large transactions rather than
// many small ones.
const windowPerSlot = 16

// maxWindow bounds the window.
const maxWindow = 1024

// maxRecordDelay bounds how long an attempt's result waits to be
// recorded while chains are in flight (a chain of one plant's many events
// reads nothing until it ends). Each record checks the lease, which a
// removed or disabled subscriber no longer has: so a subscriber removed
// with its deliveries (webhook remove, from another process) gets nothing
// more after that long, plus the attempts then in flight, which are cut
// short; before, it went on until a record of 1,024 results or the
// lease's renewal, seconds later. It costs a transaction that often for
// a subscriber being served, far fewer than its attempts.
const maxRecordDelay = 250 * time.Millisecond

// minWindowInterval spaces the reads of a subscriber that keeps up with
// the writes (the last answer was not full): what a delivery may wait,
// at most, to be sent with others. While attempts are in flight it is
// also how soon what was enqueued meanwhile is found.
const minWindowInterval = 50 * time.Millisecond

// maxTurn is how long a worker serves one subscriber before it gives the
// subscriber back, once the plants' chains then in flight end: the next
// claim takes the subscriber that has waited longest (the store's order),
// so that with more subscribers due than workers they take turns: a
// healthy one waits its turn in the rotation behind dead ones that always
// have something due (about dead ÷ workers turns, each up to a turn and
// an attempt's timeout), rather than for ever. Once the turn ends, no
// plant's chain starts and nothing more is read. A turn that
// ends while a worker is free goes on (othersMayWait): no one waits, and
// giving the subscriber back would only cost it deliveries.
const maxTurn = time.Second

// minClaimInterval spaces the dispatcher's claims; busyClaimInterval
// while some subscriber is being served.
const (
	minClaimInterval  = 10 * time.Millisecond
	busyClaimInterval = 100 * time.Millisecond
)

// downAfter is how many failures in a row (receiverDown) find a receiver
// down while its backlog goes at full speed; probeAttempts, while it is
// probed. Not one: a receiver that refuses one plant's event with a 503
// is up for the others, and a probe of that event alone would stall them
// all until its next retry.
const (
	downAfter     = 10
	probeAttempts = 3
)

// receiverDown says whether a failed attempt's status (0: no answer)
// says that the receiver cannot take deliveries now, rather than that it
// refused this one.
func receiverDown(status int) bool {
	return status == 0 || status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout
}

type stats struct {
	attempts, delivered, retried, failed, disabled, paused atomic.Int64
}

// Stats counts what this process's dispatcher did since it started.
type Stats struct {
	// Attempts made; of them Delivered succeeded, Retried failed and were
	// scheduled again, Failed were parked (failing past --webhook-park-after).
	Attempts, Delivered, Retried, Failed int64
	// Disabled counts subscribers disabled because they answered 410.
	Disabled int64
	// Paused counts the times a subscriber's receiver was found down, or
	// still down at a probe, and its deliveries were paused.
	Paused int64
}

// NewDispatcher checks cfg and fills in its defaults.
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	if cfg.Store == nil || cfg.Client == nil {
		return nil, errors.New("webhook dispatcher: a store and a client are required")
	}
	if len(cfg.Schedule.Intervals) == 0 {
		cfg.Schedule.Intervals = DefaultSchedule.Intervals
	}
	if cfg.Schedule.ParkAfter <= 0 {
		cfg.Schedule.ParkAfter = DefaultSchedule.ParkAfter
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 16
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
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
	cfg.Lease = max(cfg.Lease, LeaseFloor(cfg.AttemptTimeout))
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxDefer <= 0 {
		cfg.MaxDefer = DefaultMaxDefer
	}
	return &Dispatcher{cfg: cfg, owner: newOwner(), slots: make(chan struct{}, cfg.Workers), health: map[int64]receiverHealth{}}, nil
}

// DefaultMaxDefer is how long deliveries wait, at most, for clients'
// writes to end (DispatcherConfig.Busy).
const DefaultMaxDefer = time.Second

// busyCheck is how often a deferred window asks Busy again.
const busyCheck = 5 * time.Millisecond

// deferToWrites waits while clients' writes are in flight, MaxDefer at
// most; it says whether it waited that long (the server is saturated).
func (d *Dispatcher) deferToWrites(ctx context.Context) (saturated bool) {
	if d.cfg.Busy == nil || !d.cfg.Busy() {
		return false
	}
	deadline := time.Now().Add(d.cfg.MaxDefer)
	for d.cfg.Busy() {
		if !time.Now().Before(deadline) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(busyCheck):
		}
	}
	return false
}

// DefaultConcurrency is the attempts in flight to one subscriber unless
// DispatcherConfig.Concurrency says otherwise: enough for about a
// thousand deliveries a second to a receiver that answers in 50 ms.
const DefaultConcurrency = 64

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
		Paused:    d.stats.paused.Load(),
	}
}

// Run sends deliveries until ctx ends. Then it stops claiming, cuts the
// attempts in flight short (not recorded: they go again, at least once),
// records those that ended, releases its leases, and returns. Call it
// once.
func (d *Dispatcher) Run(ctx context.Context) {
	slots := d.slots
	finished := make(chan struct{}, d.cfg.Workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	ticker := time.NewTicker(d.cfg.Poll)
	defer ticker.Stop()
	var lastClaim time.Time
	// A claim fails at every poll while the store is away: said once a
	// minute.
	claimFaults := &faultlog.Task{Log: d.cfg.Log, Msg: "webhook claim failed"}
	for {
		// Under a stream of creates the wakes come faster than claims are
		// useful (a claimed subscriber's worker picks up its new
		// deliveries itself); space the claims, which are writes, and
		// more while workers are busy: then the wake is most likely
		// for a subscriber being served already.
		interval := minClaimInterval
		if len(slots) > 0 {
			interval = busyClaimInterval
		}
		if wait := interval - time.Since(lastClaim); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		lastClaim = time.Now()
		var claimed time.Time // when a claim found what was due; zero: none did
		if free := d.cfg.Workers - len(slots); free > 0 {
			now := d.cfg.Now()
			subs, err := d.cfg.Store.ClaimSubscribers(ctx, d.owner, d.cfg.Lease, free)
			switch {
			case err == nil:
				claimed = now
				claimFaults.Worked()
			case ctx.Err() == nil:
				claimFaults.Failed(err)
			}
			for _, sub := range subs {
				slots <- struct{}{}
				wg.Go(func() {
					progress := d.serveSubscriber(ctx, sub)
					<-slots
					// A worker that found nothing to send (its due deliveries
					// wait behind their plants' retries) does not make the
					// loop claim again at once: the poll will.
					// Never blocking: the loop takes one report a turn,
					// and a full buffer wakes it all the same. A worker
					// blocked here would keep Run's return waiting.
					if progress {
						select {
						case finished <- struct{}{}:
						default:
						}
					}
				})
			}
		}
		var retry *time.Timer
		var due <-chan time.Time
		if at, ok := d.retries.next(claimed); ok {
			if wait := at.Sub(d.cfg.Now()); wait < d.cfg.Poll {
				retry = time.NewTimer(max(wait, 0))
				due = retry.C
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-d.cfg.Wake:
		case <-finished:
		case <-due:
		}
		if retry != nil {
			retry.Stop()
		}
	}
}

// serveSubscriber sends a claimed subscriber's due deliveries until none
// is due, its turn is over or ctx ends, then gives the lease back. It
// reports whether it recorded any attempt.
//
// It is a pipeline. Senders, Concurrency at most, take chains (a plant's
// due deliveries, in order) from a queue and send each chain's one after
// another; this worker reads due deliveries again whenever a sender would
// otherwise sit idle (fewer chains queued or in flight than Concurrency),
// rather than when every chain of the last read has ended, so a slow
// attempt holds up its own plant only. Two rules make reading again safe
// with the store as it is (DueDeliveries answers a plant's in-flight
// delivery again, until its result is recorded):
//
//   - before each read, every result that came back is recorded (one
//     RecordAttempts, which renews the lease too): a failure to be
//     retried is then in the store, which keeps its plant's later
//     deliveries out of the answer until the retry;
//   - of the answer, the deliveries of a plant whose chain is still queued
//     or in flight are dropped: they come again, in order, in a read made
//     after that chain ended and its results were recorded.
//
// So no delivery is sent while an earlier one of its plant is in flight,
// or failed and not yet recorded.
func (d *Dispatcher) serveSubscriber(ctx context.Context, sub plantstore.Subscriber) (progress bool) {
	t := &turn{d: d, ctx: ctx, sub: sub, log: d.cfg.Log.With("subscriber", sub.ID, "url", RedactURL(sub.URL))}
	// At debug level, each turn is told: which instance serves whom, and
	// why it stopped.
	claimed, why := time.Now(), "stopping"
	t.log.Debug("webhook subscriber claimed")
	defer func() {
		t.log.Debug("webhook subscriber given back", "why", why, "held", time.Since(claimed).Round(time.Millisecond).String())
	}()
	key, err := ParseSecret(sub.Secret)
	if err != nil {
		why = "disabled"
		d.disable(ctx, t.log, sub.ID, "its signing secret is unusable: "+err.Error())
		return true
	}
	t.key = key
	t.concurrency = d.cfg.Concurrency
	t.window = min(windowPerSlot*t.concurrency, maxWindow)
	// A subscriber whose last attempt failed is probed first: its
	// receiver may be down.
	t.probing.Store(sub.LastError != "")
	full := t.concurrency + t.window
	if t.probing.Load() {
		t.concurrency, t.window = 1, 1
	}
	t.turnEnds.Store(time.Now().Add(maxTurn).UnixNano())
	// sctx cuts the attempts in flight short: the shutdown, a 410, the
	// lease lost.
	t.sctx, t.stop = context.WithCancel(ctx)
	defer t.stop()
	// A read adds window chains at most, and reads are made only while
	// fewer than concurrency are pending: the queue never fills.
	// Sized for the full speed a probe may reach.
	t.todo = make(chan []plantstore.Delivery, full)
	t.reports = make(chan report, 2*d.cfg.Concurrency)
	defer func() {
		close(t.todo) // every chain has ended: the senders are idle
		t.senders.Wait()
	}()
	t.pending = map[int64]bool{}
	t.renew = time.NewTimer(d.cfg.Lease / 3) // reset at each record
	defer t.renew.Stop()
	t.readAt = time.NewTimer(0) // armed while a read waits for minWindowInterval
	defer t.readAt.Stop()
	t.recordAt = time.NewTimer(maxRecordDelay)
	t.recordAt.Stop()
	defer t.recordAt.Stop()

	t.serve()
	switch {
	case t.end == endLost:
		why = t.end
		return t.progress
	case t.goneOn != "":
		// Keep the lease until the subscriber is disabled (which frees
		// it), or another worker could claim it in between.
		why = "disabled"
		t.record(t.batch, false)
		d.disable(ctx, t.log, sub.ID, fmt.Sprintf("410 Gone on event %s", t.goneOn))
		return true
	}
	if t.down.Load() {
		why = endDown
		t.pause()
		return true
	}
	why = t.end
	t.record(t.batch, true)
	// Given back for others' turn: Run claims again at once for them.
	return t.progress || t.end == endOthersTurn
}

// A turn is one service of a claimed subscriber (serveSubscriber): the
// worker's side of the pipeline, and the senders it started.
type turn struct {
	d   *Dispatcher
	ctx context.Context
	sub plantstore.Subscriber
	log *slog.Logger
	key []byte

	concurrency, window int
	// turnEnds is when the turn is over if others wait (UnixNano); the
	// senders read it too: no chain starts once the turn is over.
	turnEnds atomic.Int64
	sctx     context.Context // the senders': cut short by stop
	stop     context.CancelFunc
	todo     chan []plantstore.Delivery
	reports  chan report
	senders  sync.WaitGroup
	started  int

	pending  map[int64]bool // the plants whose chain is queued or in flight
	batch    []plantstore.AttemptResult
	renew    *time.Timer // the lease's renewal, reset at each record
	readAt   *time.Timer // armed while a read waits for minWindowInterval
	recordAt *time.Timer // armed when the batch gets its first result: maxRecordDelay

	last  time.Time // when the last read was made
	full  bool      // the last answer was full: the backlog is not drained
	stale bool      // ... and had nothing new: read again once a chain ends
	// saturated: the last read waited MaxDefer for clients' writes.
	// Then the next waits for every chain to end, as before reads were
	// pipelined: one look at Busy a window, not one each time a chain
	// ends, which would catch an instant of calm far more often and take
	// a full window in the middle of the load.
	saturated bool
	end       string // why the service ends (endLost...); once set, nothing more is read
	goneOn    string // the event that got a 410
	progress  bool   // some attempt was recorded

	// probing: the receiver may be down; one chain at a time until an
	// attempt shows it up, or probeAttempts find it down. The turn is not
	// over for others meanwhile (turnOver): a probe of a receiver that
	// times out would take a turn an attempt, and never be paused.
	probing atomic.Bool
	down    atomic.Bool // it is: no chain starts (senders read it), and the subscriber is paused
	retryAt time.Time   // the earliest retry of the turn's failures
	// retryNow: a probe found the receiver, which this dispatcher paused,
	// up; the next read first makes the deliveries that failed while it
	// was down due (RetryNow).
	retryNow bool
}

// startsNoMore says whether senders should start no more chains: the
// receiver is down, or the turn is over.
func (t *turn) startsNoMore() bool { return t.down.Load() || t.turnOver() }

// observe follows what attempts say of the receiver: down after
// downAfter failures in a row (probeAttempts while probing), which ends
// the turn; up, at full speed again, at any other answer.
func (t *turn) observe(r plantstore.AttemptResult) {
	if r.Status == http.StatusGone {
		return // the subscriber is being disabled
	}
	if r.Delivered || !receiverDown(r.Status) {
		// Up: an answer after it was found down (in flight meanwhile)
		// cancels the pause.
		t.retryAt = time.Time{}
		t.down.Store(false)
		was, _ := t.d.updateHealth(t.sub.ID, func(h *receiverHealth) { *h = receiverHealth{} })
		if t.probing.Load() {
			t.probing.Store(false)
			t.concurrency = t.d.cfg.Concurrency
			t.window = min(windowPerSlot*t.concurrency, maxWindow)
			t.retryNow = was.paused
			t.log.Info("webhook receiver answers again; its deliveries go at full speed")
		}
		return
	}
	if !r.GiveUp && (t.retryAt.IsZero() || r.NextAttempt.Before(t.retryAt)) {
		t.retryAt = r.NextAttempt
	}
	_, is := t.d.updateHealth(t.sub.ID, func(h *receiverHealth) { h.downRun++ })
	limit := downAfter
	if t.probing.Load() {
		limit = probeAttempts
	}
	if is.downRun >= limit && !t.down.Load() {
		t.down.Store(true)
		if t.end == "" {
			t.end = endDown
		}
	}
}

// pause records the turn's last results and pauses the subscriber until
// its earliest retry (or the schedule's first interval, when none is
// waiting: the probes' deliveries were parked), when its next probe goes.
func (t *turn) pause() {
	if !t.record(t.batch, false) {
		return
	}
	now := t.d.cfg.Now()
	until := t.retryAt
	if until.IsZero() {
		until, _ = t.d.cfg.Schedule.Next(1, now, now, 0, nil)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 5*time.Second)
	defer cancel()
	if _, err := t.d.cfg.Store.PauseSubscriber(ctx, t.d.owner, t.sub.ID, until); err != nil {
		t.log.Error("webhook subscriber not paused; its receiver is down, and its deliveries go on being tried", "error", err)
		t.record(nil, true) // given back, or no one serves it until the lease runs out
		return
	}
	t.d.stats.paused.Add(1)
	// Said once as a warning, when this dispatcher first finds it down
	// (the finding may come at a probe: a subscriber whose last attempt
	// failed is probed), then at each failed probe.
	level, msg := slog.LevelWarn, "webhook receiver down; its deliveries wait, and one probe goes at next_probe"
	was, _ := t.d.updateHealth(t.sub.ID, func(h *receiverHealth) { h.paused, h.downRun = true, 0 })
	if was.paused {
		level, msg = slog.LevelInfo, "webhook receiver still down; its deliveries wait for the next probe"
	}
	t.log.Log(t.ctx, level, msg, "failures_in_a_row", was.downRun, "next_probe", until.UTC().Format(time.RFC3339Nano))
}

// turnOver says whether the turn ended and another subscriber may be
// waiting for it; with none waiting, the turn goes on, and while probing
// (up to probeAttempts attempts) too.
func (t *turn) turnOver() bool {
	return time.Now().UnixNano() >= t.turnEnds.Load() && t.d.othersMayWait() && !t.probing.Load()
}

// record records results, and gives the lease back when release, else
// renews it; it reports whether the lease is still held. Bookkeeping
// outlives ctx: what was attempted is recorded even when the process is
// stopping.
func (t *turn) record(results []plantstore.AttemptResult, release bool) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 5*time.Second)
	defer cancel()
	held, err := t.d.cfg.Store.RecordAttempts(rctx, t.d.owner, t.sub.ID, results, t.d.cfg.Lease, release)
	if err != nil {
		t.log.Error("webhook attempts not recorded; they will be made again", "error", err)
		return false
	}
	t.progress = t.progress || len(results) > 0
	if !held && !release {
		// The store cannot tell which: the subscriber removed or
		// disabled (by 410, by another instance), or its lease taken
		// over after this instance stalled past it.
		t.log.Warn("webhook lease lost: the subscriber was removed or disabled, or another instance took it over")
	}
	return held
}

// flush records the batch of results and renews the lease; it reports
// false when the lease is lost.
func (t *turn) flush() bool {
	if !t.record(t.batch, false) {
		// Another instance may have the subscriber now: stop, and
		// record nothing more (what was not recorded goes again).
		t.end = endLost
		t.stop()
	}
	t.batch = nil
	t.renew.Reset(t.d.cfg.Lease / 3)
	return t.end != endLost
}

// take handles a sender's report.
func (t *turn) take(r report) {
	switch {
	case r.ended:
		delete(t.pending, r.plant)
		t.stale = false
	case t.end == endLost:
	default:
		if r.goneOn != "" && t.goneOn == "" {
			t.goneOn, t.end = r.goneOn, "disabled"
		}
		t.observe(r.result)
		if len(t.batch) == 0 {
			t.recordAt.Reset(maxRecordDelay)
		}
		t.batch = append(t.batch, r.result)
		// Record in batches: when one is full, maxRecordDelay after its
		// first result, when the lease needs renewing (serve), and before
		// each read.
		if len(t.batch) >= maxWindow {
			t.flush()
		}
	}
}

// read records what came back, reads due deliveries, queues the chains of
// the plants not pending, and starts senders up to concurrency.
func (t *turn) read() {
	// Clients' writes first: a saturated server reads a small window
	// after waiting MaxDefer, an idle one a full window at once.
	n := t.window
	t.saturated = t.d.deferToWrites(t.ctx)
	if t.saturated {
		n = min(t.window, t.concurrency)
	}
	if t.ctx.Err() != nil {
		return
	}
	for drained := false; !drained; {
		select {
		case r := <-t.reports:
			t.take(r)
		default:
			drained = true
		}
	}
	if t.end != "" || (len(t.batch) > 0 && !t.flush()) {
		return // a 410 or the lease lost came meanwhile
	}
	if t.retryNow {
		t.retryNow = false
		if err := t.d.cfg.Store.RetryNow(t.ctx, t.sub.ID); err != nil && t.ctx.Err() == nil {
			t.log.Warn("webhook deliveries that failed while the receiver was down wait for their retries", "error", err)
		}
	}
	t.last = time.Now()
	ds, err := t.d.cfg.Store.DueDeliveries(t.ctx, t.sub.ID, n)
	if err != nil {
		if t.ctx.Err() == nil {
			t.end = "deliveries not read"
			t.log.Warn("webhook deliveries not read", "error", err)
		}
		return
	}
	t.full = len(ds) == n
	chains := newChains(ds, t.pending)
	if len(chains) == 0 {
		if len(t.pending) == 0 {
			t.end = "nothing due"
		}
		t.stale = t.full
		return
	}
	for _, chain := range chains {
		t.pending[chain[0].Plant.ID] = true
		t.todo <- chain
	}
	for ; t.started < t.concurrency && t.started < len(t.pending); t.started++ {
		t.senders.Go(func() { t.d.sendChains(t.sctx, t.log, t.sub, t.key, t.todo, t.reports, t.startsNoMore, t.stop) })
	}
}

// serve runs the turn until it ends (t.end) and no chain is pending.
func (t *turn) serve() {
	for {
		if t.end == "" {
			switch {
			case t.ctx.Err() != nil:
				t.end = "stopping"
			case t.turnOver():
				t.end = endOthersTurn
			case time.Now().UnixNano() >= t.turnEnds.Load():
				t.turnEnds.Store(time.Now().Add(maxTurn).UnixNano()) // no one waits: the turn goes on
			}
		}
		if t.end != "" && len(t.pending) == 0 {
			return
		}
		// Read when a sender would idle. An answer that was not full
		// found the backlog drained: the subscriber keeps up with the
		// writes. Then the next read waits a little, so that it gathers
		// the deliveries of many writes and their results are recorded
		// in one transaction, rather than a transaction (and an fsync)
		// per write taken from the writes; it also finds, that often,
		// what was enqueued while chains are in flight.
		var readDue <-chan time.Time
		if t.end == "" && len(t.pending) < t.concurrency && !t.stale && !(t.saturated && len(t.pending) > 0) {
			wait := time.Duration(0)
			if !t.full && !t.last.IsZero() {
				wait = minWindowInterval - time.Since(t.last)
			}
			if wait <= 0 {
				t.read()
				continue
			}
			t.readAt.Reset(wait)
			readDue = t.readAt.C
		}
		var done <-chan struct{}
		if t.end == "" {
			done = t.ctx.Done()
		}
		var renewDue, recordDue <-chan time.Time
		if t.end != endLost {
			renewDue = t.renew.C
			if len(t.batch) > 0 {
				recordDue = t.recordAt.C
			}
		}
		select {
		case r := <-t.reports:
			t.take(r)
		case <-readDue:
		case <-done:
		case <-renewDue:
			t.flush() // the lease renewed while attempts are in flight
		case <-recordDue:
			t.flush()
		}
	}
}

// Reasons a subscriber's service ends that the worker tests for later;
// the others (nothing due, stopping, disabled) are only logged.
const (
	endLost       = "lease lost or attempts not recorded"
	endOthersTurn = "others' turn"
	endDown       = "receiver down"
)

// A report is what a sender tells the worker: a result to record, or,
// after the results of its chain, that the chain of plant ended.
type report struct {
	result plantstore.AttemptResult
	goneOn string // with a result: the event that got a 410
	ended  bool
	plant  int64
}

// newChains groups ds, due deliveries in id order, into chains, one per
// plant, in the order of their first delivery; it leaves out the plants
// in pending, whose earlier deliveries may still be in flight.
func newChains(ds []plantstore.Delivery, pending map[int64]bool) [][]plantstore.Delivery {
	var chains [][]plantstore.Delivery
	at := map[int64]int{}
	for _, dl := range ds {
		if pending[dl.Plant.ID] {
			continue
		}
		i, ok := at[dl.Plant.ID]
		if !ok {
			i = len(chains)
			at[dl.Plant.ID] = i
			chains = append(chains, nil)
		}
		chains[i] = append(chains[i], dl)
	}
	return chains
}

// sendChains is a sender: it sends the chains it takes from todo, each
// plant's deliveries one after another, and reports each result, then
// that the chain ended. A chain stops at a failure that will be retried
// (its plant's later deliveries wait), and everything stops at a 410 or
// when ctx ends. A chain taken once the turn is over, the receiver is
// down or ctx ended is not sent: it waits for the subscriber's next turn.
func (d *Dispatcher) sendChains(ctx context.Context, log *slog.Logger, sub plantstore.Subscriber, key []byte,
	todo <-chan []plantstore.Delivery, reports chan<- report, startsNoMore func() bool, stop func()) {
	for chain := range todo {
		if ctx.Err() == nil && !startsNoMore() {
			for _, dl := range chain {
				r, outcome := d.attempt(ctx, log, sub, key, dl)
				if outcome != Delivered && ctx.Err() != nil {
					break // cut short: not the subscriber's failure, not recorded
				}
				if outcome == Gone {
					// The attempt counts: it is parked with the 410,
					// and disabling parks the subscriber's others.
					reports <- report{result: r, goneOn: dl.EventID}
					stop()
					break
				}
				reports <- report{result: r}
				if !r.Delivered && !r.GiveUp {
					break // the plant's later deliveries wait behind it
				}
			}
		}
		reports <- report{ended: true, plant: chain[0].Plant.ID}
	}
}

// attempt sends one delivery and says what to record.
func (d *Dispatcher) attempt(ctx context.Context, log *slog.Logger, sub plantstore.Subscriber, key []byte, dl plantstore.Delivery) (plantstore.AttemptResult, Outcome) {
	start := d.cfg.Now()
	res := Send(ctx, d.cfg.Client, Message{ID: dl.EventID, URL: sub.URL, Key: key, Body: DeliveryBody(dl),
		Type: dl.EventType, Seq: dl.Seq}, start)
	if res.Outcome != Delivered && ctx.Err() != nil {
		// Cut short (the shutdown, the lease lost, another chain's 410):
		// not the subscriber's failure, and not recorded; the
		// delivery goes out again later.
		log.Info("webhook attempt cut short; not counted", "event", dl.EventID, "plant", dl.Plant.ID)
		return plantstore.AttemptResult{DeliveryID: dl.ID}, Retry
	}
	d.stats.attempts.Add(1)
	// Every attempt is logged; typed attributes through LogAttrs spare
	// each line the key-value pairs' boxing and parsing.
	attrs := []slog.Attr{slog.String("event", dl.EventID), slog.String("type", dl.EventType), slog.Int64("seq", dl.Seq),
		slog.Int64("plant", dl.Plant.ID), slog.Int("attempt", dl.Attempts+1), slog.Int("status", res.Status),
		slog.Float64("duration_ms", float64(d.cfg.Now().Sub(start).Microseconds())/1000)}
	r := plantstore.AttemptResult{DeliveryID: dl.ID, Status: res.Status}
	switch res.Outcome {
	case Delivered:
		d.stats.delivered.Add(1)
		r.Delivered = true
		log.LogAttrs(ctx, slog.LevelInfo, "webhook delivered", append(attrs, slog.String("outcome", res.Outcome.String()))...)
	case Gone:
		r.Error, r.GiveUp = attemptError(res), true
		log.LogAttrs(ctx, slog.LevelWarn, "webhook subscriber answered 410 Gone; disabling it", append(attrs, slog.String("outcome", res.Outcome.String()))...)
	default:
		r.Error = attemptError(res)
		firstFailed := d.cfg.Now()
		if dl.FirstFailedAt != nil {
			firstFailed = *dl.FirstFailedAt
		}
		r.NextAttempt, r.GiveUp = d.cfg.Schedule.Next(dl.Attempts+1, firstFailed, d.cfg.Now(), res.RetryAfter, nil)
		attrs = append(attrs, slog.String("error", r.Error))
		if r.GiveUp {
			d.stats.failed.Add(1)
			log.LogAttrs(ctx, slog.LevelError, "webhook delivery parked; its plant's later events go on (plantstore webhook retry sends it again)",
				append(attrs, slog.String("outcome", "parked"))...)
		} else {
			d.stats.retried.Add(1)
			d.retries.add(r.NextAttempt)
			log.LogAttrs(ctx, slog.LevelWarn, "webhook attempt failed", append(attrs, slog.String("outcome", "retry"),
				slog.String("next_attempt", r.NextAttempt.UTC().Format(time.RFC3339Nano)))...)
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
	// An error: nothing goes to it any more until someone acts, and its
	// parked deliveries, unlike a delivery's, get no line of their own.
	log.Error("webhook subscriber disabled; its pending deliveries are parked and it gets no more events (plantstore webhook remove, then add, resumes it)", "reason", reason)
}

// LeaseFloor is the shortest lease a dispatcher keeps with attempts of
// timeout: a lease must outlast the attempts made under it, and a shorter
// one is raised to this.
func LeaseFloor(timeout time.Duration) time.Duration { return 3 * timeout }

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

// DeliveryBody is the body of a delivery: for plant.created the NewPlant
// (EventBody), as before there were other events; for the others the
// event as GET /events shows it, {"id", "type", "time", "plant"}, which
// carries its type and feed id under the signature.
func DeliveryBody(dl plantstore.Delivery) []byte {
	if dl.EventType == plantstore.EventCreated || dl.EventType == "" {
		return EventBody(dl.Plant)
	}
	return eventJSON(plantstore.Event{ID: dl.Seq, Type: dl.EventType, At: dl.CreatedAt, Plant: dl.Plant})
}

// eventJSON encodes e as GET /events shows it, byte for byte: its fields
// and time format, and the same JSON encoding (encodeJSON).
func eventJSON(e plantstore.Event) []byte {
	return encodeJSON(struct {
		ID    int64          `json:"id"`
		Type  string         `json:"type"`
		Time  string         `json:"time"`
		Plant jsontext.Value `json:"plant"`
	}{e.ID, e.Type, e.At.UTC().Format("2006-01-02T15:04:05.000Z07:00"), EventBody(e.Plant)})
}

// EventBody is the body of a new-plant event: the NewPlant the API
// accepted, {"id", "name", "tag"?}, encoded from the plant as committed.
func EventBody(p plantstore.Plant) []byte {
	return encodeJSON(struct {
		ID   int64   `json:"id"`
		Name string  `json:"name"`
		Tag  *string `json:"tag,omitzero"` // "" is a tag; only none is left out
	}{p.ID, p.Name, p.Tag})
}

// encodeJSON encodes v as the API encodes its answers: no escapes for
// HTML or JavaScript (U+2028 and U+2029 go as they are, as in GET /events;
// encoding/json would escape them), invalid UTF-8 as U+FFFD.
func encodeJSON(v any) []byte {
	b, err := json.Marshal(v, jsontext.AllowInvalidUTF8(true))
	if err != nil {
		panic(err) // integers and strings always encode
	}
	return b
}
