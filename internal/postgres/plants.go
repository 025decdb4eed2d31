package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plantstore/plantstore"
)

// insertAttempts bounds how often a create retries when the plant it
// collided with is deleted before it can be read.
const insertAttempts = 3

// Writes carry their caller's deadline to the server, and change nothing
// once it has passed by the server's clock (the clause gate): a statement
// that reached the server late, or waited in its socket while the server
// or the network stalled, would otherwise commit after its caller was
// answered 503, and undo what came after (a delete answered 204 since,
// say). A statement that passed the gate may still wait for locks (a
// plant's row, then the event counter) that stalled sessions hold, while
// its caller's cancel cannot reach the server: the statement is capped at
// what is left until the deadline (capStatementTimeout), all its waits
// together. What remains is a write that timed out while it was being
// committed.

// gate is the clause "gate" of a write: whether the server's clock is
// still within the deadline, the parameter deadline; read once, as a
// MATERIALIZED clause is.
func gate(deadline string) string {
	return `gate AS MATERIALIZED (SELECT clock_timestamp() <= ` + deadline + `::timestamptz AS open)`
}

// deadlineOf is the deadline gate compares with: ctx's, else one that
// never passes.
func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return noDeadline
}

var noDeadline = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// capStatementTimeout lowers statement_timeout, for the rest of the
// transaction, to $1 (an interval: "250ms"), unless it is lower already (a
// role's setting, say): each statement after it, lock waits and all, ends
// by then. lock_timeout (--busy-timeout) still bounds each wait.
const capStatementTimeout = `SELECT set_config('statement_timeout',
		CASE WHEN t.cur = '0' OR t.cur > $1::text::interval THEN $1::text ELSE current_setting('statement_timeout') END, true)
	FROM (SELECT current_setting('statement_timeout')::interval AS cur) t`

// queueDeadline queues capStatementTimeout for what is left until
// deadline, at least a millisecond; nothing for noDeadline. Queued right
// before a statement, it caps that one by the time left when it is sent.
func queueDeadline(b *pgx.Batch, deadline time.Time) {
	if deadline.Equal(noDeadline) {
		return
	}
	ms := max(time.Until(deadline).Milliseconds(), 1)
	b.Queue(capStatementTimeout, strconv.FormatInt(ms, 10)+"ms")
}

// writeRow runs sql, a write that answers one row, into dest, capped by
// deadline (queueDeadline), in one round trip, through q: the pool, where
// the batch is one implicit transaction the cap ends with, or a
// transaction's connection.
func writeRow(ctx context.Context, q interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, deadline time.Time, sql string, args []any, dest ...any) error {
	b := &pgx.Batch{}
	queueDeadline(b, deadline)
	b.Queue(sql, args...).QueryRow(func(r pgx.Row) error { return r.Scan(dest...) })
	return q.SendBatch(ctx, b).Close()
}

// gatedWrite runs sql, a write of one plant whose last parameter is its
// deadline (gate) and whose last column says whether it was within it,
// into dest, capped by ctx's deadline (writeRow), through q: errLate when
// the gate was closed.
func gatedWrite(ctx context.Context, q interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, sql string, args []any, dest ...any) error {
	deadline := deadlineOf(ctx)
	var open bool
	if err := writeRow(ctx, q, deadline, sql, append(args, deadline), append(dest, &open)...); err != nil {
		return err
	}
	if !open {
		return errLate
	}
	return nil
}

// errLate is the answer to a write that reached the server after its
// deadline, and was not made. Its caller was most likely answered
// already.
var errLate = plantstore.Errorf(plantstore.EUNAVAILABLE, "the store did not answer in time: the write reached the database after its deadline, and was not made")

// createPlant runs one create, which Options.NoBatch asks for and a
// failed batch falls back to. Under READ COMMITTED the insert waits for a
// concurrent transaction that holds the same id, and does nothing once
// that one commits; the read that follows is a new statement with a new
// snapshot, so it sees the row that won. Each statement commits on its
// own: the insert, which also records the event of a new plant and writes
// its webhook outbox rows, is the only write.
func (db *DB) createPlant(ctx context.Context, p plantstore.Plant) (bool, error) {
	for range insertAttempts {
		var inserted, enqueued int
		var ev recordedEvents
		err := gatedWrite(ctx, db.pool, db.sql.insertPlant, []any{p.ID, p.Name, p.Tag, db.now(), plantstore.NewEventID(), db.seen.Load()},
			&inserted, &enqueued, &ev.last, &ev.leapt)
		if err != nil {
			return false, err
		}
		if enqueued > 0 && db.enqueued != nil {
			db.enqueued()
		}
		db.recorded(ev)
		if inserted == 1 {
			return true, nil
		}
		stored, err := getPlant(ctx, db.pool, p.ID)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // deleted since the insert saw it: the id is free again
		}
		if err != nil {
			return false, err
		}
		if !stored.SameContent(p) {
			return false, plantstore.Errorf(plantstore.ECONFLICT, "plant %d already exists with other content", p.ID)
		}
		return false, nil // an idempotent replay of a committed create
	}
	return false, plantstore.Errorf(plantstore.EUNAVAILABLE, "plant %d is being created and deleted concurrently; retry", p.ID)
}

// insertPlantSQL inserts a plant unless its id is taken and, only when it
// did, its event and one webhook delivery per active subscriber of
// plant.created (those without a webhook_subscriber_events row too): one
// statement, so one transaction, holds all of them or none. Data-modifying
// WITH clauses run whether or not the outer query reads them. It returns
// whether it inserted, the number of deliveries written, the id of the
// event recorded (NULL when none) and whether the write leapt ($6: the
// newest event id this instance saw; takeEventIDs), and whether it was
// within the deadline $7 (gate).
var insertPlantSQL = `WITH ` + gate("$7") + `, changed AS (
		INSERT INTO plants (id, name, tag, created_at)
		SELECT $1::bigint, $2::text, $3::text, $4::timestamptz FROM gate WHERE gate.open
		ON CONFLICT (id) DO NOTHING
		RETURNING id, name, tag, created_at
	), ` + takeEventIDs("$6") + `, enqueued AS (
		INSERT INTO webhook_deliveries (subscriber_id, event_id, plant_id, name, tag, created_at, next_attempt_at, event_seq)
		SELECT s.id, $5, i.id, i.name, i.tag, i.created_at, i.created_at, c.last
		FROM changed i CROSS JOIN counter c CROSS JOIN webhook_subscribers s
		LEFT JOIN webhook_subscriber_events t ON t.subscriber_id = s.id
		WHERE s.disabled_at IS NULL AND coalesce(t.created, true)
		ORDER BY s.id
		RETURNING 1
	), recorded AS (
		INSERT INTO events (id, type, plant_id, name, tag, at)
		SELECT c.last, 'plant.created', i.id, i.name, i.tag, i.created_at
		FROM changed i CROSS JOIN counter c
		RETURNING id
	)
	SELECT (SELECT count(*) FROM changed)::int, (SELECT count(*) FROM enqueued)::int, ` + notifyEvents + `, (SELECT open FROM gate)`

// getOne reads plant id in a statement of its own (Options.NoReadBatch).
func (db *DB) getOne(ctx context.Context, id int64) (plantstore.Plant, error) {
	p, err := getPlant(ctx, db.pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return plantstore.Plant{}, plantstore.PlantNotFound(id)
	}
	if err != nil {
		return plantstore.Plant{}, db.storeError(getOp(id), err)
	}
	return p, nil
}

// getPlant returns pgx.ErrNoRows when there is no plant id.
func getPlant(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id int64) (plantstore.Plant, error) {
	p := plantstore.Plant{ID: id}
	err := q.QueryRow(ctx, `SELECT name, tag FROM plants WHERE id = $1`, id).Scan(&p.Name, &p.Tag)
	return p, err
}

func (db *DB) UpdatePlant(ctx context.Context, p plantstore.Plant, cond plantstore.Precondition) error {
	op := fmt.Sprintf("update plant %d", p.ID)
	if cond != nil {
		var enqueued int
		err := db.conditionally(ctx, p.ID, cond, func(tx pgx.Tx, stored plantstore.Plant) (recordedEvents, error) {
			var ev recordedEvents
			if stored.SameContent(p) {
				return ev, nil // no change, no event
			}
			err := gatedWrite(ctx, tx, db.sql.updatePlant, []any{p.ID, p.Name, p.Tag, db.now(), plantstore.NewEventID(), db.seen.Load()}, &enqueued, &ev.last, &ev.leapt)
			return ev, err
		})
		db.wake(err, enqueued)
		return db.storeError(op, err)
	}
	for range insertAttempts {
		var ev recordedEvents
		var enqueued int
		err := retry(ctx, func(ctx context.Context) error {
			return gatedWrite(ctx, db.pool, db.sql.updatePlant, []any{p.ID, p.Name, p.Tag, db.now(), plantstore.NewEventID(), db.seen.Load()}, &enqueued, &ev.last, &ev.leapt)
		})
		if err != nil {
			return db.storeError(op, err)
		}
		if ev.last != nil {
			db.wake(nil, enqueued)
			db.recorded(ev)
			return nil
		}
		// Nothing updated: the plant is missing, or has this content
		// already. A new statement, so a new snapshot, tells which.
		stored, err := getPlant(ctx, db.pool, p.ID)
		if errors.Is(err, pgx.ErrNoRows) {
			return plantstore.PlantNotFound(p.ID)
		}
		if err != nil {
			return db.storeError(op, err)
		}
		if stored.SameContent(p) {
			return nil
		}
		// Changed since the update looked: go round again.
	}
	return plantstore.Errorf(plantstore.EUNAVAILABLE, "plant %d is being changed concurrently; retry", p.ID)
}

// updatePlantSQL gives plant $1 the name $2 and tag $3 unless it has them
// already, and records the change's event at $4, with one webhook
// delivery (webhook-id $5) per active subscriber of plant.updated: an
// update that changes nothing records none. It returns the number of
// deliveries and the event's id, NULL when it changed nothing (the plant
// is missing, or already so, or the deadline $7 had passed), whether the
// write leapt ($6: the newest event id this instance saw; takeEventIDs),
// and whether it was within that deadline (gate).
var updatePlantSQL = `WITH ` + gate("$7") + `, changed AS (
		UPDATE plants SET name = $2, tag = $3
		WHERE id = $1 AND (name IS DISTINCT FROM $2 OR tag IS DISTINCT FROM $3) AND (SELECT open FROM gate)
		RETURNING id, name, tag
	), ` + recordChange("plant.updated", "updated", "$4", "$5", "$6") + `
	SELECT (SELECT count(*) FROM enqueued)::int, ` + notifyEvents + `, (SELECT open FROM gate)`

func (db *DB) DeletePlant(ctx context.Context, id int64, cond plantstore.Precondition) error {
	op := fmt.Sprintf("delete plant %d", id)
	if cond != nil {
		var enqueued int
		err := db.conditionally(ctx, id, cond, func(tx pgx.Tx, _ plantstore.Plant) (recordedEvents, error) {
			var ev recordedEvents
			err := gatedWrite(ctx, tx, db.sql.deletePlant, []any{id, db.now(), plantstore.NewEventID(), db.seen.Load()}, &enqueued, &ev.last, &ev.leapt)
			return ev, err
		})
		db.wake(err, enqueued)
		return db.storeError(op, err)
	}
	var ev recordedEvents
	var enqueued int
	err := retry(ctx, func(ctx context.Context) error {
		return gatedWrite(ctx, db.pool, db.sql.deletePlant, []any{id, db.now(), plantstore.NewEventID(), db.seen.Load()}, &enqueued, &ev.last, &ev.leapt)
	})
	if err != nil {
		return db.storeError(op, err)
	}
	if ev.last == nil {
		return plantstore.PlantNotFound(id)
	}
	db.wake(nil, enqueued)
	db.recorded(ev)
	return nil
}

// deletePlantSQL deletes plant $1 and records the event, at $2, with the
// content it had, and one webhook delivery (webhook-id $3) per active
// subscriber of plant.deleted. It returns the number of deliveries and the
// event's id, NULL when there was no plant (or the deadline $5 had
// passed), whether the write leapt ($4: the newest event id this instance
// saw; takeEventIDs), and whether it was within that deadline (gate).
var deletePlantSQL = `WITH ` + gate("$5") + `, changed AS (
		DELETE FROM plants WHERE id = $1 AND (SELECT open FROM gate)
		RETURNING id, name, tag
	), ` + recordChange("plant.deleted", "deleted", "$2", "$3", "$4") + `
	SELECT (SELECT count(*) FROM enqueued)::int, ` + notifyEvents + `, (SELECT open FROM gate)`

// recordChange is the tail of the statements that change one plant
// (their clause "changed"): the counter's id (takeEventIDs, with the
// parameter seen), the event of type typ at the parameter at, and one
// delivery, webhook-id the parameter webhookID, per active subscriber
// whose column subscribed of webhook_subscriber_events is set. Its arguments are constants of this
// file, never input.
func recordChange(typ, subscribed, at, webhookID, seen string) string {
	return takeEventIDs(seen) + `, recorded AS (
		INSERT INTO events (id, type, plant_id, name, tag, at)
		SELECT c.last, '` + typ + `', p.id, p.name, p.tag, ` + at + `
		FROM changed p CROSS JOIN counter c
		RETURNING id
	), enqueued AS (
		INSERT INTO webhook_deliveries (subscriber_id, event_id, plant_id, name, tag, created_at, next_attempt_at, event_type, event_seq)
		SELECT s.id, ` + webhookID + `, p.id, p.name, p.tag, ` + at + `, ` + at + `, '` + typ + `', c.last
		FROM changed p CROSS JOIN counter c CROSS JOIN webhook_subscribers s
		JOIN webhook_subscriber_events t ON t.subscriber_id = s.id
		WHERE s.disabled_at IS NULL AND t.` + subscribed + `
		ORDER BY s.id
		RETURNING 1
	)`
}

// wake tells this instance's dispatcher that a write that committed (err
// nil) enqueued deliveries.
func (db *DB) wake(err error, enqueued int) {
	if err == nil && enqueued > 0 && db.enqueued != nil {
		db.enqueued()
	}
}

// conditionally runs write in a transaction that first locks the plant
// with id and checks cond against it: ENOTFOUND without the plant,
// EPRECONDITION when cond does not hold, and no write either way. The row
// lock keeps any other writer from coming between the check and the
// change. write returns what its statement says of the events it
// recorded.
func (db *DB) conditionally(ctx context.Context, id int64, cond plantstore.Precondition, write func(pgx.Tx, plantstore.Plant) (recordedEvents, error)) error {
	var ev recordedEvents
	err := retry(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) (err error) {
			stored := plantstore.Plant{ID: id}
			b := &pgx.Batch{}
			queueDeadline(b, deadlineOf(ctx)) // for the lock below; the write caps itself again
			b.Queue(`SELECT name, tag FROM plants WHERE id = $1 FOR UPDATE`, id).QueryRow(func(r pgx.Row) error {
				return r.Scan(&stored.Name, &stored.Tag)
			})
			err = tx.SendBatch(ctx, b).Close()
			if errors.Is(err, pgx.ErrNoRows) {
				return plantstore.PlantNotFound(id)
			}
			if err != nil {
				return err
			}
			if !cond(stored) {
				return plantstore.Errorf(plantstore.EPRECONDITION, "plant %d is not in the state the write was conditioned on", id)
			}
			ev, err = write(tx, stored)
			return err
		})
	})
	if err == nil {
		db.recorded(ev)
	}
	return err
}
