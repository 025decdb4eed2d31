package plantstore

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Webhooks tell subscribers about the changes of plants: the types of
// event each asked for (plant.created only, unless it asked for more). The
// store keeps them in a transactional outbox: a write that records an
// event (events.go) writes one delivery per active subscriber of that
// type in the same transaction, so a change that was acknowledged is
// announced and one that was not stored is not. A dispatcher
// (internal/webhook) sends the deliveries in the background, at least
// once, several at a time, but the events of one plant one after another,
// in the order they were recorded.
//
// A subscriber is leased by one dispatcher at a time, so that with several
// instances on one database a delivery normally goes out once and the
// events of a plant keep their order; a crashed instance's lease runs out
// and another instance takes the subscriber over.
//
// A delivery that keeps failing is parked once the retry schedule gives up
// on it (after --webhook-park-after): it is kept, listed, and not sent
// again until RetryDeliveries, while the plant's later events go on.

// Subscriber is a receiver of events.
type Subscriber struct {
	ID  int64
	URL string
	// Events are the event types it gets, in the order of EventTypes:
	// [EventCreated] unless it asked for more.
	Events []string
	// Secret signs every delivery ("whsec_" + base64). The store keeps it
	// in clear, as every webhook sender must to sign; it is shown once, when
	// the subscriber is added, and never listed.
	Secret    string
	CreatedAt time.Time
	// DisabledAt is set when the subscriber answered 410 Gone: it gets no
	// more events, and its pending deliveries are failed (parked).
	DisabledAt     *time.Time
	DisabledReason string
	// Counts of its deliveries: waiting to go out (or to be retried),
	// delivered, and parked (given up on until retried; every pending
	// delivery of a disabled subscriber is parked too).
	Pending, Delivered, Failed int64
	// LastError is the newest failed attempt's reason (or why the
	// subscriber was disabled), "" when none or once a later delivery has
	// succeeded. LastErrorAt is when it happened: nil when there is none,
	// and for an error recorded before the store kept the time.
	LastError   string
	LastErrorAt *time.Time
	// NextProbe is set while its receiver is down (PauseSubscriber): its
	// deliveries wait, and the next probe goes then.
	NextProbe *time.Time
}

// The states of a subscriber, as State names them.
const (
	// SubscriberActive: events go to it, and its last attempt, if any,
	// succeeded.
	SubscriberActive = "active"
	// SubscriberFailing: events go to it, but its last attempt failed;
	// the delivery is being retried, or was given up on if the failed
	// count grew. The next successful delivery makes it active again.
	SubscriberFailing = "failing"
	// SubscriberDisabled: it gets no events (it answered 410 Gone, or its
	// secret is unusable). Remove it and add it again to resume.
	SubscriberDisabled = "disabled"
	// SubscriberDown: its receiver was found down; its deliveries wait
	// for the probe at NextProbe, and go once a probe finds it up.
	SubscriberDown = "down"
)

// State is what the subscriber's fields say of it: SubscriberDisabled,
// SubscriberDown, SubscriberFailing or SubscriberActive.
func (s Subscriber) State() string {
	switch {
	case s.DisabledAt != nil:
		return SubscriberDisabled
	case s.NextProbe != nil:
		return SubscriberDown
	case s.LastError != "":
		return SubscriberFailing
	}
	return SubscriberActive
}

// Delivery is one event on its way to one subscriber. Its EventID is the
// same for every subscriber and every retry of the event, so receivers can
// drop duplicates.
type Delivery struct {
	ID           int64
	SubscriberID int64
	EventID      string
	// EventType is the event's type, EventCreated for a delivery written
	// by a version that knew no other.
	EventType string
	// Seq is the change feed's id of the event (Event.ID), by which
	// receivers order the events of a plant; 0 for a delivery written by
	// a version that did not record events.
	Seq int64
	// Plant is the plant as the change left it (for a delete, as it was);
	// the body sent is encoded from it, the same bytes on every attempt.
	Plant     Plant
	CreatedAt time.Time
	// Attempts counts the failed attempts so far; FirstFailedAt is when
	// the first failed, nil before any did. The park bound counts from it.
	Attempts      int
	FirstFailedAt *time.Time
	// Of a parked delivery: when it was parked, and its last failure.
	ParkedAt   *time.Time
	LastStatus int
	LastError  string
}

// AttemptResult is what became of a delivery attempt, as the dispatcher
// records it.
type AttemptResult struct {
	DeliveryID int64
	// Delivered: the subscriber answered 2xx; the delivery is done, and
	// the subscriber's last error is cleared.
	Delivered bool
	// Otherwise the attempt failed: Status is the answer's HTTP status (0
	// when there was none) and Error says why. The delivery is retried at
	// NextAttempt, or, when GiveUp is set, parked.
	Status      int
	Error       string
	NextAttempt time.Time
	GiveUp      bool
}

// DeliveryCounts are the deliveries of every subscriber, for monitoring.
type DeliveryCounts struct {
	Pending, Delivered, Failed int64
}

// WebhookStore keeps subscribers and their outbox.
type WebhookStore interface {
	// AddSubscriber stores a new active subscriber with url and secret,
	// which the caller has checked, for plant.created events only, and
	// returns it with its ID.
	AddSubscriber(ctx context.Context, url, secret string) (Subscriber, error)
	// AddSubscriberFor is AddSubscriber for the event types events: one
	// or more of EventTypes, EINVALID otherwise.
	AddSubscriberFor(ctx context.Context, url, secret string, events []string) (Subscriber, error)
	// Subscribers lists every subscriber with its counts, in ID order,
	// without secrets.
	Subscribers(ctx context.Context) ([]Subscriber, error)
	// RemoveSubscriber deletes a subscriber and its deliveries, or returns
	// ENOTFOUND.
	RemoveSubscriber(ctx context.Context, id int64) error

	// ClaimSubscribers leases to owner, until lease from now, up to n
	// active subscribers whose oldest pending delivery is due and which no
	// live lease holds, nor a pause (PauseSubscriber). The subscribers
	// come with their secrets and their LastError.
	ClaimSubscribers(ctx context.Context, owner string, lease time.Duration, n int) ([]Subscriber, error)
	// DueDeliveries returns up to n of the subscriber's pending deliveries
	// that are due and not behind an earlier pending delivery of the same
	// plant that waits for its retry, oldest first. The events of one
	// plant come in order; the caller must send each only after the
	// earlier ones of its plant in the answer were delivered or parked.
	DueDeliveries(ctx context.Context, subscriberID int64, n int) ([]Delivery, error)
	// RecordAttempts stores what became of attempts at the subscriber's
	// deliveries, in one transaction, and renews owner's lease on it
	// (release: gives it up instead). Results for deliveries that no longer
	// exist, or were parked already, are ignored; of the others, the last
	// sets the subscriber's last error and its time (a failure) or clears
	// them (a delivery). It reports whether owner still held the lease.
	RecordAttempts(ctx context.Context, owner string, subscriberID int64, results []AttemptResult, lease time.Duration, release bool) (held bool, err error)
	// PauseSubscriber gives owner's lease back, as RecordAttempts'
	// release does, and no one claims the subscriber before until: its
	// receiver is down, and its deliveries wait for the next probe.
	// RetryDeliveries ends the pause of the subscribers it retries for. It
	// reports whether owner held the lease.
	PauseSubscriber(ctx context.Context, owner string, subscriberID int64, until time.Time) (held bool, err error)
	// RetryNow makes the subscriber's pending deliveries that wait for a
	// retry due now: its receiver, found down, answers again, and what
	// failed while it was down need not wait out the schedule.
	RetryNow(ctx context.Context, subscriberID int64) error
	// DisableSubscriber stops events to a subscriber (it answered 410) and
	// fails its pending deliveries with reason, which becomes its last
	// error, timed now; ENOTFOUND if it is gone.
	DisableSubscriber(ctx context.Context, id int64, reason string) error
	// CountDeliveries counts every subscriber's deliveries.
	CountDeliveries(ctx context.Context) (DeliveryCounts, error)

	// ParkedDeliveries lists up to n parked deliveries, of the subscriber
	// with subscriberID or of all when it is 0, oldest first, with their
	// last error.
	ParkedDeliveries(ctx context.Context, subscriberID int64, n int) ([]Delivery, error)
	// RetryDeliveries makes parked deliveries pending again, due now and
	// with no failed attempt: those with ids, or, when ids is empty, every
	// one of the subscriber with subscriberID (which must then be given).
	// It returns how many. An id that is not a parked delivery of an
	// active subscriber (of subscriberID, when not 0) is ENOTFOUND, and
	// then none is retried; so is a subscriberID that is not an active
	// subscriber.
	RetryDeliveries(ctx context.Context, subscriberID int64, ids []int64) (int, error)
}

// NotRetried is RetryDeliveries' ENOTFOUND when of the deliveries asked
// for (sorted, without repeats) only those retried were eligible: it
// names the others.
func NotRetried(asked, retried []int64) error {
	var others []string
	for _, id := range asked {
		if !slices.Contains(retried, id) {
			others = append(others, strconv.FormatInt(id, 10))
		}
	}
	advice := "none was retried, so retry the others alone"
	if len(retried) == 0 {
		advice = "none was retried"
	}
	return Errorf(ENOTFOUND, "not a parked delivery of an active subscriber: %s (webhook list shows them; a disabled subscriber's stay parked); %s",
		strings.Join(others, ", "), advice)
}

// SubscriberEvents checks a subscriber's event types and returns them in
// the order of EventTypes, without repeats: EINVALID for an unknown one or
// none.
func SubscriberEvents(events []string) ([]string, error) {
	if len(events) == 0 {
		return nil, Errorf(EINVALID, "a subscriber needs one event type or more (%s)", strings.Join(EventTypes, ", "))
	}
	for _, e := range events {
		if !ValidEventType(e) {
			return nil, Errorf(EINVALID, "unknown event type %q: want %s", e, strings.Join(EventTypes, ", "))
		}
	}
	var out []string
	for _, known := range EventTypes {
		if slices.Contains(events, known) {
			out = append(out, known)
		}
	}
	return out, nil
}

// NewEventID makes the id of a new event: "msg_" and 128 random bits, so
// ids from any number of instances never collide.
func NewEventID() string {
	var b [16]byte
	rand.Read(b[:])
	return "msg_" + eventIDEncoding.EncodeToString(b[:])
}

var eventIDEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)
