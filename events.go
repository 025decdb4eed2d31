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

// EventQuery selects events.
type EventQuery struct {
	// After is the id of the last event the client has: the events
	// after it are answered, or EGONE when some of them are no longer
	// kept. 0 is before the first event ever recorded.
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
	// is before the retention horizon), it returns EGONE instead: the
	// client must resync. A Limit below 1 is EINVALID.
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
