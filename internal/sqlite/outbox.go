package sqlite

import (
	"database/sql/driver"
	"math/bits"
	"strings"

	"github.com/plantstore/plantstore"
)

// enqueueEvents writes the outbox rows for events, the batch's, which
// recordEvents has just inserted, in the batch's transaction: one row per
// active subscriber of the event's type, in the order of the events and,
// within one, of the subscribers. It reports whether it wrote any. With
// no active subscriber it costs one small read per batch.
//
// The rows go in multi-row INSERTs of power-of-two sizes, as the plants
// and the events do: a statement per event cost a create about as much as
// its plant and its event together (measured on one core: 12 µs a create).
func enqueueEvents(c *rawConn, events []plantstore.Event, now int64) (bool, error) {
	if len(events) == 0 {
		return false, nil
	}
	var active bool
	err := c.query(anySubscriberSQL, nil, func(v []driver.Value) bool {
		active = v[0].(int64) != 0
		return false
	})
	if err != nil || !active {
		return false, err
	}
	// The batch's events are the newest rows, their ids consecutive: one
	// writer, in one transaction, and AUTOINCREMENT takes the next id.
	var last int64
	err = c.query(`SELECT seq FROM sqlite_sequence WHERE name = 'events'`, nil, func(v []driver.Value) bool {
		last = v[0].(int64)
		return false
	})
	if err != nil {
		return false, err
	}
	first := last - int64(len(events)) + 1
	var wrote bool
	for start := 0; start < len(events); {
		chunk := events[start : start+prevPowerOfTwo(len(events)-start)]
		args := make([]any, 0, 7*len(chunk))
		for i, e := range chunk {
			p := e.Plant
			args = append(args, plantstore.NewEventID(), p.ID, p.Name, p.Tag, e.Type, first+int64(start+i), now)
		}
		n, err := c.exec(multiEnqueueSQL[bits.TrailingZeros(uint(len(chunk)))], args...)
		if err != nil {
			return false, err
		}
		wrote = wrote || n > 0
		start += len(chunk)
	}
	return wrote, nil
}

// A subscriber without a webhook_subscriber_events row gets plant.created
// only. A plant.created delivery is written with a NULL event_type, as
// earlier versions write it.
const anySubscriberSQL = `SELECT EXISTS (SELECT 1 FROM webhook_subscribers WHERE disabled_at IS NULL)`

// multiEnqueueSQL holds the statements enqueueing 1, 2, 4, ... maxBatch
// events, by log2 of their count: seven parameters an event (its
// webhook-id, plant id, name, tag, type, feed id and the time). They are
// anonymous: the driver looks up each numbered one (?NNN) by a linear
// scan, which made binding 256 rows cost more than inserting them.
var multiEnqueueSQL = func() (stmts [maxBatchLog2 + 1]string) {
	for i := range stmts {
		var rows strings.Builder
		for n := range 1 << i {
			if n > 0 {
				rows.WriteString(", ")
			}
			rows.WriteString("(?, ?, ?, ?, ?, ?, ?)")
		}
		stmts[i] = `INSERT INTO webhook_deliveries (subscriber_id, event_id, plant_id, name, tag, created_at, next_attempt_at, event_type, event_seq)
		SELECT s.id, v.column1, v.column2, v.column3, v.column4, v.column7, v.column7, nullif(v.column5, 'plant.created'), v.column6
		FROM (VALUES ` + rows.String() + `) v
		JOIN webhook_subscribers s LEFT JOIN webhook_subscriber_events t ON t.subscriber_id = s.id
		WHERE s.disabled_at IS NULL AND CASE v.column5
			WHEN 'plant.created' THEN coalesce(t.created, 1)
			WHEN 'plant.updated' THEN coalesce(t.updated, 0)
			ELSE coalesce(t.deleted, 0) END
		ORDER BY v.column6, s.id`
	}
	return stmts
}()
