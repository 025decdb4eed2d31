package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"math/bits"
	"strings"

	"github.com/plantstore/plantstore"
)

// The outbox is the change feed itself. A change writes only its event;
// the webhook deliveries of the events after outbox_cursor are written
// later, by copyOutbox, which the dispatcher runs before it reads a
// window (DueDeliveries). So a create costs the same with subscribers as
// without (one outbox row per create and subscriber cost it about 15% on
// one core, in the webhook harness), and the copying waits with the
// deliveries while clients saturate the server. The events after the
// cursor are kept until they are copied (PruneEvents copies those it
// prunes first).

// subscribersActive reports, in the batch's transaction, whether any
// subscriber is active, so the writer wakes the dispatcher after the
// commit only when there may be something to deliver: one small read per
// batch.
func subscribersActive(c *rawConn) (bool, error) {
	var active bool
	err := c.query(anySubscriberSQL, nil, func(v []driver.Value) bool {
		active = v[0].(int64) != 0
		return false
	})
	return active, err
}

const anySubscriberSQL = `SELECT EXISTS (SELECT 1 FROM webhook_subscribers WHERE disabled_at IS NULL)`

// outboxChunk bounds the events one copyOutbox transaction copies, and
// outboxRows the delivery rows it writes (give or take a batch of
// events): with many subscribers an event is many rows, some 10 µs each.
// So it holds the write lock briefly.
const (
	outboxChunk = 4 * maxBatch
	outboxRows  = 16384
)

// outboxBehind reports whether events after the outbox cursor wait to be
// copied: one read of two one-row tables.
func (db *DB) outboxBehind(ctx context.Context) (bool, error) {
	var behind bool
	err := db.read.QueryRowContext(ctx, `SELECT `+outboxFromSQL+` < `+lastEventSQL).Scan(&behind)
	return behind, err
}

// outboxFromSQL is the last event no active subscriber needs copied:
// the cursor, or the oldest active subscriber's since_event if later (the
// events before it no subscriber will get), and the largest id when no
// subscriber is active.
const outboxFromSQL = `max((SELECT through FROM outbox_cursor),
	coalesce((SELECT min(since_event) FROM webhook_subscribers WHERE disabled_at IS NULL), 9223372036854775807))`

// copyOutbox copies the next batches of events after the outbox cursor,
// until they hold outboxChunk events or more, into webhook_deliveries, in
// one transaction that moves the cursor past them, and reports whether
// events remain after it. The cursor ends a batch: it moves by whole
// batches, and a subscriber's since_event was the last id when it was
// added. Each event gets a row for each subscriber that was active when
// it was recorded and is now, and asked for its type; the rows of one
// event share its webhook-id.
func (db *DB) copyOutbox(ctx context.Context) (more bool, err error) {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var through, last, subscribers int64
	if err := tx.QueryRowContext(ctx, `SELECT `+outboxFromSQL+`, `+lastEventSQL+`,
		(SELECT count(*) FROM webhook_subscribers WHERE disabled_at IS NULL)`).Scan(&through, &last, &subscribers); err != nil {
		return false, err
	}
	if through >= last {
		return false, nil
	}
	events, err := eventsAfter(ctx, tx, through, int(max(1, min(outboxChunk, outboxRows/max(subscribers, 1)))))
	if err != nil {
		return false, err
	}
	if len(events) > 0 {
		more = events[len(events)-1].ID < last
		last = events[len(events)-1].ID
	}
	if err := enqueueEvents(ctx, tx, events); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE outbox_cursor SET through = ?`, last); err != nil {
		return false, err
	}
	return more, tx.Commit()
}

// copyWholeOutbox copies every event after the cursor.
func (db *DB) copyWholeOutbox(ctx context.Context) error {
	for {
		more, err := db.copyOutbox(ctx)
		if err != nil || !more {
			return err
		}
	}
}

// eventsAfter reads the events after id, in id order, in whole batches
// until it has n or more.
func eventsAfter(ctx context.Context, tx *sql.Tx, id int64, n int) ([]plantstore.Event, error) {
	every := wantedTypes(nil)
	rows, err := tx.QueryContext(ctx, batchesAfterSQL, id, every[0], every[1], every[2])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var events []plantstore.Event
	for len(events) < n && rows.Next() {
		var b storedBatch
		var changes string
		if err := rows.Scan(&b.last, &b.at, &b.counts[0], &b.counts[1], &b.counts[2], &changes); err != nil {
			return nil, err
		}
		batch, err := b.events(changes)
		if err != nil {
			return nil, err
		}
		for _, e := range batch {
			if e.ID > id {
				events = append(events, e)
			}
		}
	}
	return events, rows.Err()
}

// enqueueEvents writes the outbox rows of events, in multi-row INSERTs of
// power-of-two sizes: one per subscriber that wants the event, in the
// order of the events and, within one, of the subscribers.
func enqueueEvents(ctx context.Context, tx *sql.Tx, events []plantstore.Event) error {
	for start := 0; start < len(events); {
		chunk := events[start : start+prevPowerOfTwo(min(len(events)-start, maxBatch))]
		args := make([]any, 0, 7*len(chunk))
		for _, e := range chunk {
			p := e.Plant
			args = append(args, plantstore.NewEventID(), p.ID, p.Name, p.Tag, e.Type, e.ID, millis(e.At))
		}
		if _, err := tx.ExecContext(ctx, multiEnqueueSQL[bits.TrailingZeros(uint(len(chunk)))], args...); err != nil {
			return err
		}
		start += len(chunk)
	}
	return nil
}

// multiEnqueueSQL holds the statements enqueueing 1, 2, 4, ... maxBatch
// events, by log2 of their count: seven parameters an event (its
// webhook-id, plant id, name, tag, type, feed id and time). They are
// anonymous: the driver looks up each numbered one (?NNN) by a linear
// scan. A subscriber without a webhook_subscriber_events row gets
// plant.created only; a plant.created delivery is written with a NULL
// event_type, as earlier versions write it.
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
		JOIN webhook_subscribers s ON s.since_event < v.column6
		LEFT JOIN webhook_subscriber_events t ON t.subscriber_id = s.id
		WHERE s.disabled_at IS NULL AND ` + wantsEventSQL("v.column5") + `
		ORDER BY v.column6, s.id`
	}
	return stmts
}()

// wantsEventSQL is true when subscriber s, with its events row t (LEFT
// JOINed), asks for events of the type in column.
func wantsEventSQL(column string) string {
	return `CASE ` + column + `
			WHEN 'plant.created' THEN coalesce(t.created, 1)
			WHEN 'plant.updated' THEN coalesce(t.updated, 0)
			ELSE coalesce(t.deleted, 0) END`
}

// pendingInFeedSQL counts the events not yet copied that subscriber s
// (its events row t LEFT JOINed) will get: by the batches' counts, as the
// outbox cursor and since_event end batches.
var pendingInFeedSQL = `(SELECT coalesce(sum(coalesce(t.created, 1) * b.created + coalesce(t.updated, 0) * b.updated + coalesce(t.deleted, 0) * b.deleted), 0)
	FROM event_batches b
	WHERE b.last > max(s.since_event, (SELECT through FROM outbox_cursor)) AND s.disabled_at IS NULL)`

// copyOutboxFor copies the outbox until the subscriber has n deliveries
// due (as DueDeliveries reads them) or no event is left to copy: enough
// for its next window, and no more, while the deliveries wait for
// clients. Deliveries that wait for a retry, or behind one, do not count:
// the events after them go meanwhile (a probe reads a window of one, and
// one plant's failing event would otherwise hold every later one back).
func (db *DB) copyOutboxFor(ctx context.Context, subscriberID int64, n int) error {
	for {
		behind, err := db.outboxBehind(ctx)
		if err != nil || !behind {
			return err
		}
		var due int
		if err := db.read.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM webhook_deliveries d WHERE `+dueSQL+` LIMIT ?3)`,
			subscriberID, millis(db.now()), n).Scan(&due); err != nil {
			return err
		}
		if due >= n {
			return nil
		}
		if _, err := db.copyOutbox(ctx); err != nil {
			return err
		}
	}
}

// copyOutboxBefore copies the outbox while the first batch not copied was
// recorded before cutoff (Unix milliseconds): through the batches
// PruneEvents would prune, which stops at the first that was not (a
// clock stepped back), and a chunk's worth after.
func (db *DB) copyOutboxBefore(ctx context.Context, cutoff int64) error {
	for {
		var behind bool
		err := db.read.QueryRowContext(ctx, `SELECT at < ? FROM event_batches WHERE last > (SELECT `+outboxFromSQL+`) ORDER BY last LIMIT 1`,
			cutoff).Scan(&behind)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // every batch copied
		}
		if err != nil || !behind {
			return err
		}
		if more, err := db.copyOutbox(ctx); err != nil || !more {
			return err
		}
	}
}

// dueSQL holds for a delivery d of subscriber ?1 that is due at ?2 and
// waits behind no retry of its plant. The subquery probes
// webhook_deliveries_waiting, which holds only the deliveries that failed
// and wait for a retry: few.
const dueSQL = `d.subscriber_id = ?1 AND d.failed_at IS NULL AND d.next_attempt_at <= ?2
	AND NOT EXISTS (SELECT 1 FROM webhook_deliveries w
	     WHERE w.subscriber_id = ?1 AND w.plant_id = d.plant_id AND w.failed_at IS NULL AND w.attempts > 0
	       AND w.id < d.id AND w.next_attempt_at > ?2)`

// pruneBoundSQL is the last event PruneEvents may delete: the events
// after outboxFromSQL are still to be copied.
const pruneBoundSQL = `SELECT ` + outboxFromSQL
