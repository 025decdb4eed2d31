package plantstore

import (
	"context"
	"time"
)

// The change feed. Every write that changes a plant records an event in
// the same transaction: a plant acknowledged as created, updated or
// deleted has its event, and a write that failed has none. Event ids
// increase in commit order, so a reader never sees event N+1 before event
// N, and are never reused: a client that has seen N resumes after N, and
// misses nothing and sees nothing twice. Events are kept for a retention
// period; one asked for after it is gone is EGONE, and the client resyncs
// from the plants themselves.
//
// No event is recorded for what changes nothing: a create replayed with
// the same content, a create that conflicts, an update to the content the
// plant already has, any refused request.

// Event types.
const (
	EventCreated = "plant.created"
	EventUpdated = "plant.updated"
	EventDeleted = "plant.deleted"
)

// EventTypes are every event type, in the order they are documented.
var EventTypes = []string{EventCreated, EventUpdated, EventDeleted}

// Event is one change of one plant.
type Event struct {
	ID   int64
	Type string
	At   time.Time
	// Plant is the plant as the change left it; for a delete, as it was
	// when deleted.
	Plant Plant
}

// EventsGone is the EGONE of a query after an event the store no longer
// keeps all of the events after: those up to horizon are pruned.
func EventsGone(after, horizon int64) error {
	return Errorf(EGONE, "the events after %d are no longer all kept (the oldest kept follows %d): %s", after, horizon, resyncAdvice)
}

// EventsLost is the EGONE of a query after an event that a change of
// database may have lost: a failover, a switchover or a restore put in
// service a copy that may lack its last changes, and the feed starts again
// after lostThrough.
func EventsLost(after, lostThrough int64) error {
	return Errorf(EGONE, "the events after %d may be lost: the database was replaced by a copy that may lack its last changes (a failover, a switchover or a restore), and the feed starts again after %d: %s", after, lostThrough, resyncAdvice)
}

// EventsAhead is the EGONE of a query after an event the store has not
// recorded (its newest is latest): ids are never reused, so the client's
// position comes from a store that has since gone back, restored from a
// backup, and what it saw after latest may be undone.
func EventsAhead(after, latest int64) error {
	return Errorf(EGONE, "there is no event %d: the newest is %d (was the store restored from a backup?): %s", after, latest, resyncAdvice)
}

const resyncAdvice = "resync: note the Latest-Event-Id header, read the plants from GET /plants, then follow the feed after that id"

// EventQuery selects events.
type EventQuery struct {
	// After is the id of the last event the client has: the events
	// after it are answered, or EGONE when some of them are no longer
	// kept, or when it is after the newest event recorded. 0 is before
	// the first event ever recorded.
	After int64
	// FromOldest asks for the oldest events kept, wherever they start,
	// instead of those after After: never EGONE.
	FromOldest bool
	// Limit is the most events answered, 1 or more.
	Limit int
	// Types keeps only events of these types; all when empty.
	Types []string
}

// EventStore keeps the change feed.
type EventStore interface {
	// Events returns up to q.Limit events with ids greater than q.After
	// (or the oldest kept, with q.FromOldest), in id order, of q.Types
	// when given. When some event after q.After is no longer kept (q.After
	// is before the retention horizon), or q.After is after the newest
	// event recorded, it returns EGONE instead (EventsGone, EventsAhead):
	// the client must resync. A Limit below 1 is EINVALID.
	Events(ctx context.Context, q EventQuery) ([]Event, error)
	// LatestEventID is the id of the newest event recorded, 0 when none.
	LatestEventID(ctx context.Context) (int64, error)
	// PruneEvents deletes the events recorded before cutoff, oldest first,
	// and returns how many it deleted. The events after the newest one it
	// deleted are all kept.
	PruneEvents(ctx context.Context, cutoff time.Time) (int, error)
}

// ValidEventType reports whether t is an event type.
func ValidEventType(t string) bool {
	for _, known := range EventTypes {
		if t == known {
			return true
		}
	}
	return false
}
