package sqlite

import (
	"context"
	"database/sql/driver"

	"time"

	"github.com/plantstore/plantstore"
)

// The change feed's events are recorded by the writer (writer.go), in the
// transaction of the writes they describe.

// eventsSQL are the feed's queries, fixed text with parameters: by the
// number of types asked for (0: all).
var eventsSQL = [...]string{
	`SELECT id, type, plant_id, name, tag, at FROM events WHERE id > ? ORDER BY id LIMIT ?`,
	`SELECT id, type, plant_id, name, tag, at FROM events WHERE id > ? AND type IN (?) ORDER BY id LIMIT ?`,
	`SELECT id, type, plant_id, name, tag, at FROM events WHERE id > ? AND type IN (?, ?) ORDER BY id LIMIT ?`,
	`SELECT id, type, plant_id, name, tag, at FROM events WHERE id > ? AND type IN (?, ?, ?) ORDER BY id LIMIT ?`,
}

func (db *DB) Events(ctx context.Context, q plantstore.EventQuery) ([]plantstore.Event, error) {
	if q.Limit < 1 {
		return nil, plantstore.Errorf(plantstore.EINVALID, "event limit %d: must be 1 or more", q.Limit)
	}
	if len(q.Types) >= len(eventsSQL) {
		return nil, plantstore.Errorf(plantstore.EINVALID, "at most %d event types", len(eventsSQL)-1)
	}
	args := []any{q.After}
	for _, t := range q.Types {
		args = append(args, t)
	}
	args = append(args, int64(q.Limit))
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
		var horizon int64
		if err := c.query(`SELECT pruned_through FROM event_horizon`, nil, func(v []driver.Value) bool {
			horizon = v[0].(int64)
			return false
		}); err != nil {
			return err
		}
		if q.FromOldest {
			args[0] = horizon
		} else if q.After < horizon {
			return plantstore.Errorf(plantstore.EGONE,
				"the events after %d are no longer all kept (the oldest kept follows %d): resync from GET /plants, then follow the feed from now", q.After, horizon)
		}
		return c.query(eventsSQL[len(q.Types)], args, func(v []driver.Value) bool {
			events = append(events, plantstore.Event{
				ID:    v[0].(int64),
				Type:  v[1].(string),
				Plant: plantstore.Plant{ID: v[2].(int64), Name: v[3].(string), Tag: optionalText(v[4])},
				At:    time.UnixMilli(v[5].(int64)).UTC(),
			})
			return true
		})
	})
	if err != nil {
		return nil, storeError("read events", err)
	}
	return events, nil
}

func (db *DB) LatestEventID(ctx context.Context) (int64, error) {
	// AUTOINCREMENT keeps the largest id ever given in sqlite_sequence,
	// even once every event is pruned; no row yet means no event yet.
	var id int64
	err := db.readDurable(ctx, func(c *rawConn) error {
		return c.query(`SELECT seq FROM sqlite_sequence WHERE name = 'events'`, nil, func(v []driver.Value) bool {
			id = v[0].(int64)
			return false
		})
	})
	if err != nil {
		return 0, storeError("read the latest event id", err)
	}
	return id, nil
}

// pruneChunk bounds one prune transaction, so it holds the write lock
// briefly.
const pruneChunk = 1000

// PruneEvents deletes, oldest first, the events recorded before cutoff,
// stopping at the first that is not: ids increase with time but a clock
// can step back, and the feed must stay whole after its horizon. It also
// stops at the outbox cursor: the webhook deliveries of the events after
// it are not written yet.
func (db *DB) PruneEvents(ctx context.Context, cutoff time.Time) (int, error) {
	pruned := 0
	for {
		n, done, err := db.pruneSome(ctx, millis(cutoff))
		pruned += n
		if err != nil {
			return pruned, storeError("prune events", err)
		}
		if done {
			return pruned, nil
		}
	}
}

func (db *DB) pruneSome(ctx context.Context, cutoff int64) (n int, done bool, err error) {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback()
	// Not past the outbox cursor (outbox.go).
	var bound int64
	if err := tx.QueryRowContext(ctx, pruneBoundSQL).Scan(&bound); err != nil {
		return 0, false, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, at FROM events WHERE id <= ? ORDER BY id LIMIT ?`, bound, pruneChunk)
	if err != nil {
		return 0, false, err
	}
	var last int64
	seen := 0
	done = true
	for rows.Next() {
		var id, at int64
		if err := rows.Scan(&id, &at); err != nil {
			rows.Close()
			return 0, false, err
		}
		seen++
		if at >= cutoff {
			break
		}
		last, n = id, n+1
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, false, err
	}
	if n == 0 {
		return 0, true, nil
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM events WHERE id <= ?`, last); err != nil {
		return 0, false, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE event_horizon SET pruned_through = ?`, last); err != nil {
		return 0, false, err
	}
	if err := tx.Commit(); err != nil {
		return 0, false, err
	}
	return n, n < pruneChunk || seen < pruneChunk, nil
}
