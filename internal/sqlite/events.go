package sqlite

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/plantstore/plantstore"
)

// The change feed's events are recorded by the writer (writer.go), in the
// transaction of the writes they describe.

func (db *DB) Events(ctx context.Context, q plantstore.EventQuery) ([]plantstore.Event, error) {
	if q.Limit < 1 {
		return nil, plantstore.Errorf(plantstore.EINVALID, "event limit %d: must be 1 or more", q.Limit)
	}
	if len(q.Types) > len(plantstore.EventTypes) {
		return nil, plantstore.Errorf(plantstore.EINVALID, "at most %d event types", len(plantstore.EventTypes))
	}
	events := make([]plantstore.Event, 0, min(q.Limit, 1024))
	err := db.readDurable(ctx, func(c *rawConn) (err error) {
		// One read transaction for the horizon and the events, so a prune
		// between the two cannot hide a gap.
		if _, err := c.exec(`BEGIN`); err != nil {
			return err
		}
		defer func() {
			if _, e := c.exec(`COMMIT`); err == nil {
				err = e
			}
		}()
		var horizon, latest int64
		if err := c.query(`SELECT pruned_through, `+lastEventSQL+` FROM event_horizon`, nil, func(v []driver.Value) bool {
			horizon, latest = v[0].(int64), v[1].(int64)
			return false
		}); err != nil {
			return err
		}
		after := q.After
		switch {
		case q.FromOldest:
			after = horizon
		case after < horizon:
			return plantstore.EventsGone(after, horizon)
		case after > latest:
			return plantstore.EventsAhead(after, latest)
		}
		var decodeErr error
		wanted := wantedTypes(q.Types)
		err = c.query(batchesAfterSQL, []any{after, wanted[0], wanted[1], wanted[2]}, func(v []driver.Value) bool {
			b := storedBatch{last: v[0].(int64), at: v[1].(int64), counts: [3]int64{v[2].(int64), v[3].(int64), v[4].(int64)}}
			var batch []plantstore.Event
			if batch, decodeErr = b.events(v[5].(string)); decodeErr != nil {
				return false
			}
			for _, e := range batch {
				if e.ID <= after || (len(q.Types) > 0 && !slices.Contains(q.Types, e.Type)) {
					continue
				}
				events = append(events, e)
				if len(events) == q.Limit {
					return false
				}
			}
			return true
		})
		return cmp.Or(err, decodeErr)
	})
	if err != nil {
		return nil, storeError("read events", err)
	}
	return events, nil
}

// batchesAfterSQL reads, in order, the batches holding the events after
// an id (?1) and an event of a type wanted (?2 created, ?3 updated, ?4
// deleted: wantedTypes): the row's columns as storedBatch and changes.
// The types are asked in SQL, not of the rows in Go: a type few batches
// hold then costs SQLite's scan of the counts, not every batch's changes
// copied out (160 ms a page over a week's 30,000 batches; see
// BenchmarkEventsOfARareType).
const batchesAfterSQL = `SELECT last, at, created, updated, deleted, changes FROM event_batches
	WHERE last > ?1 AND (?2 AND created > 0 OR ?3 AND updated > 0 OR ?4 AND deleted > 0) ORDER BY last`

// wantedTypes is, for each of plantstore.EventTypes in order, whether a
// query of types wants it: every one when types is empty.
func wantedTypes(types []string) (wanted [3]bool) {
	for i, t := range plantstore.EventTypes {
		wanted[i] = len(types) == 0 || slices.Contains(types, t)
	}
	return wanted
}

// storedBatch is an event_batches row but its changes: the id of its
// last event, their time, and how many of each type it holds (in the
// order of plantstore.EventTypes).
type storedBatch struct {
	last, at int64
	counts   [3]int64
}

// packedEvent is one event as event_batches.changes holds it; its id and
// time are the batch's.
type packedEvent struct {
	Type string  `json:"type"`
	ID   int64   `json:"id"`
	Name string  `json:"name"`
	Tag  *string `json:"tag,omitzero"`
}

// events decodes the batch's changes, the events from its first id to
// its last.
func (b storedBatch) events(changes string) ([]plantstore.Event, error) {
	var packed []packedEvent
	if err := json.Unmarshal([]byte(changes), &packed); err != nil {
		return nil, fmt.Errorf("event batch %d: %w", b.last, err)
	}
	if n := b.counts[0] + b.counts[1] + b.counts[2]; int64(len(packed)) != n {
		return nil, fmt.Errorf("event batch %d: %d events, its counts say %d", b.last, len(packed), n)
	}
	at := time.UnixMilli(b.at).UTC()
	first := b.last - int64(len(packed)) + 1
	events := make([]plantstore.Event, len(packed))
	for i, p := range packed {
		events[i] = plantstore.Event{ID: first + int64(i), Type: p.Type, At: at,
			Plant: plantstore.Plant{ID: p.ID, Name: p.Name, Tag: p.Tag}}
	}
	return events, nil
}

// appendChanges appends the JSON of event_batches.changes for events.
// Names and tags are valid UTF-8 (the API refuses others), so quoting
// them cannot fail.
func appendChanges(b []byte, events []plantstore.Event) []byte {
	b = append(b, '[')
	for i, e := range events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":`...)
		b, _ = jsontext.AppendQuote(b, e.Type)
		b = append(b, `,"id":`...)
		b = strconv.AppendInt(b, e.Plant.ID, 10)
		b = append(b, `,"name":`...)
		b, _ = jsontext.AppendQuote(b, e.Plant.Name)
		if e.Plant.Tag != nil {
			b = append(b, `,"tag":`...)
			b, _ = jsontext.AppendQuote(b, *e.Plant.Tag)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// recordBatchSQL records a batch's events, the ids following the last
// one given.
const recordBatchSQL = `INSERT INTO event_batches (last, at, created, updated, deleted, changes)
	VALUES (` + lastEventSQL + ` + ?1, ?2, ?3, ?4, ?5, ?6)`

// recordEvents records events, in order, as one batch.
func recordEvents(c *rawConn, events []plantstore.Event, now int64) error {
	if len(events) == 0 {
		return nil
	}
	var counts [3]int64
	for _, e := range events {
		counts[slices.Index(plantstore.EventTypes, e.Type)]++
	}
	_, err := c.exec(recordBatchSQL, int64(len(events)), now, counts[0], counts[1], counts[2],
		string(appendChanges(make([]byte, 0, 64*len(events)), events)))
	return err
}

func (db *DB) LatestEventID(ctx context.Context) (int64, error) {
	var id int64
	err := db.readDurable(ctx, func(c *rawConn) error {
		return c.query(`SELECT `+lastEventSQL, nil, func(v []driver.Value) bool {
			id = v[0].(int64)
			return false
		})
	})
	if err != nil {
		return 0, storeError("read the latest event id", err)
	}
	return id, nil
}

// lastEventSQL is the id of the last event recorded, pruned or not (0 for
// none): the last of the newest batch, or the horizon once every batch is
// pruned.
const lastEventSQL = `max(coalesce((SELECT max(last) FROM event_batches), 0), (SELECT pruned_through FROM event_horizon))`

// pruneChunk bounds the events one prune transaction deletes (give or
// take a batch), so it holds the write lock briefly.
const pruneChunk = 1000

// PruneEvents deletes, oldest first, the batches of events recorded
// before cutoff, stopping at the first that is not: ids increase with
// time but a clock can step back, and the feed must stay whole after its
// horizon. It copies the outbox through them first: their webhook
// deliveries, which keep their own copy of the event, are written before
// the events go, so that a subscriber whose receiver is down (its
// deliveries wait for a probe, and copying waits with them) holds no
// event past the retention.
func (db *DB) PruneEvents(ctx context.Context, cutoff time.Time) (int, error) {
	// A copy that fails (a full disk, say) leaves the events it did not
	// copy, and pruning goes up to them: it may free the space.
	copyErr := storeError("copy webhook deliveries before pruning", db.copyOutboxBefore(ctx, millis(cutoff)))
	pruned := 0
	for {
		n, done, err := db.pruneSome(ctx, millis(cutoff))
		pruned += n
		if err != nil {
			return pruned, errors.Join(copyErr, storeError("prune events", err))
		}
		if done {
			return pruned, copyErr
		}
	}
}

// pruneSome prunes the oldest batches, whole, until they held
// pruneChunk events or more, and returns how many events they held, and
// whether pruning is done.
func (db *DB) pruneSome(ctx context.Context, cutoff int64) (n int, done bool, err error) {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback()
	// Not past the outbox cursor (outbox.go), which ends a batch: events
	// written since copyOutboxBefore may have subscribers.
	var bound int64
	if err := tx.QueryRowContext(ctx, pruneBoundSQL).Scan(&bound); err != nil {
		return 0, false, err
	}
	// A batch holds at least one event: pruneChunk rows are enough.
	rows, err := tx.QueryContext(ctx, `SELECT last, at, created + updated + deleted FROM event_batches WHERE last <= ? ORDER BY last LIMIT ?`, bound, pruneChunk)
	if err != nil {
		return 0, false, err
	}
	var last int64
	done = true // unless the chunk fills up before the cutoff and the bound
	for rows.Next() {
		var id, at, count int64
		if err := rows.Scan(&id, &at, &count); err != nil {
			rows.Close()
			return 0, false, err
		}
		if at >= cutoff {
			break
		}
		last, n = id, n+int(count)
		if n >= pruneChunk {
			done = false
			break
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, false, err
	}
	if n == 0 {
		return 0, true, nil
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM event_batches WHERE last <= ?`, last); err != nil {
		return 0, false, err
	}
	// Never lowered: a restore may have put it past every batch kept
	// (carryEventIDs).
	if _, err := tx.ExecContext(ctx, `UPDATE event_horizon SET pruned_through = max(pruned_through, ?)`, last); err != nil {
		return 0, false, err
	}
	if err := tx.Commit(); err != nil {
		return 0, false, err
	}
	return n, done, nil
}
