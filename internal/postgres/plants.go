package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/plantstore/plantstore"
)

// insertAttempts bounds how often a create retries when the plant it
// collided with is deleted before it can be read.
const insertAttempts = 3

// createPlant runs one create, which Options.NoBatch asks for and a
// failed batch falls back to. Under READ COMMITTED the insert waits for a
// concurrent transaction that holds the same id, and does nothing once
// that one commits; the read that follows is a new statement with a new
// snapshot, so it sees the row that won. Each statement commits on its
// own: the insert, which also writes the webhook outbox rows of a new
// plant, is the only write.
func (db *DB) createPlant(ctx context.Context, p plantstore.Plant) (bool, error) {
	for range insertAttempts {
		var inserted, enqueued int
		err := db.pool.QueryRow(ctx, insertPlantSQL, p.ID, p.Name, p.Tag, db.now(), plantstore.NewEventID()).Scan(&inserted, &enqueued)
		if err != nil {
			return false, err
		}
		if enqueued > 0 && db.enqueued != nil {
			db.enqueued()
		}
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
// did, one webhook delivery per active subscriber: one statement, so one
// transaction, holds both or neither. Data-modifying WITH clauses run
// whether or not the outer query reads them.
const insertPlantSQL = `WITH inserted AS (
		INSERT INTO plants (id, name, tag, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO NOTHING
		RETURNING id, name, tag, created_at
	), enqueued AS (
		INSERT INTO webhook_deliveries (subscriber_id, event_id, plant_id, name, tag, created_at, next_attempt_at)
		SELECT s.id, $5, i.id, i.name, i.tag, i.created_at, i.created_at
		FROM inserted i CROSS JOIN webhook_subscribers s
		WHERE s.disabled_at IS NULL
		ORDER BY s.id
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM inserted)::int, (SELECT count(*) FROM enqueued)::int`

func (db *DB) GetPlant(ctx context.Context, id int64) (plantstore.Plant, error) {
	p, err := getPlant(ctx, db.pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return plantstore.Plant{}, plantstore.Errorf(plantstore.ENOTFOUND, "plant %d not found", id)
	}
	if err != nil {
		return plantstore.Plant{}, db.storeError(fmt.Sprintf("get plant %d", id), err)
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

// ListPlants reads one page by keyset: "id >= lower" on the primary key,
// or "tag = $1 AND id >= lower" on plants_by_tag, so the page's position in
// the table does not change its cost.
func (db *DB) ListPlants(ctx context.Context, opts plantstore.ListOptions) ([]plantstore.Plant, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	lower, ok := opts.FirstID()
	if !ok {
		return []plantstore.Plant{}, nil
	}
	var rows pgx.Rows
	var err error
	if opts.Tag != nil {
		rows, err = db.pool.Query(ctx, `SELECT id, name, tag FROM plants WHERE tag = $1 AND id >= $2 ORDER BY id LIMIT $3`,
			*opts.Tag, lower, opts.Limit)
	} else {
		rows, err = db.pool.Query(ctx, `SELECT id, name, tag FROM plants WHERE id >= $1 ORDER BY id LIMIT $2`,
			lower, opts.Limit)
	}
	if err != nil {
		return nil, db.storeError("list plants", err)
	}
	plants := make([]plantstore.Plant, 0, min(opts.Limit, 1024))
	var p plantstore.Plant
	_, err = pgx.ForEachRow(rows, []any{&p.ID, &p.Name, &p.Tag}, func() error {
		plants = append(plants, p)
		p.Tag = nil // a fresh pointer for the next row's tag
		return nil
	})
	if err != nil {
		return nil, db.storeError("list plants", err)
	}
	return plants, nil
}

func (db *DB) UpdatePlant(ctx context.Context, p plantstore.Plant, cond plantstore.Precondition) error {
	op := fmt.Sprintf("update plant %d", p.ID)
	if cond != nil {
		return db.storeError(op, db.conditionally(ctx, p.ID, cond, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE plants SET name = $2, tag = $3 WHERE id = $1`, p.ID, p.Name, p.Tag)
			return err
		}))
	}
	var tag pgconn.CommandTag
	err := retry(ctx, func(ctx context.Context) (err error) {
		tag, err = db.pool.Exec(ctx, `UPDATE plants SET name = $2, tag = $3 WHERE id = $1`, p.ID, p.Name, p.Tag)
		return err
	})
	return db.changedOrNotFound(op, p.ID, tag, err)
}

func (db *DB) DeletePlant(ctx context.Context, id int64, cond plantstore.Precondition) error {
	op := fmt.Sprintf("delete plant %d", id)
	if cond != nil {
		return db.storeError(op, db.conditionally(ctx, id, cond, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `DELETE FROM plants WHERE id = $1`, id)
			return err
		}))
	}
	var tag pgconn.CommandTag
	err := retry(ctx, func(ctx context.Context) (err error) {
		tag, err = db.pool.Exec(ctx, `DELETE FROM plants WHERE id = $1`, id)
		return err
	})
	return db.changedOrNotFound(op, id, tag, err)
}

// conditionally runs write in a transaction that first locks the plant
// with id and checks cond against it: ENOTFOUND without the plant,
// EPRECONDITION when cond does not hold, and no write either way. The row
// lock keeps any other writer from coming between the check and the
// change.
func (db *DB) conditionally(ctx context.Context, id int64, cond plantstore.Precondition, write func(pgx.Tx) error) error {
	return retry(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			stored := plantstore.Plant{ID: id}
			err := tx.QueryRow(ctx, `SELECT name, tag FROM plants WHERE id = $1 FOR UPDATE`, id).Scan(&stored.Name, &stored.Tag)
			if errors.Is(err, pgx.ErrNoRows) {
				return plantstore.Errorf(plantstore.ENOTFOUND, "plant %d not found", id)
			}
			if err != nil {
				return err
			}
			if !cond(stored) {
				return plantstore.Errorf(plantstore.EPRECONDITION, "plant %d is not in the state the write was conditioned on", id)
			}
			return write(tx)
		})
	})
}

// changedOrNotFound turns a statement's outcome into nil when it changed a
// row and ENOTFOUND when there was none.
func (db *DB) changedOrNotFound(op string, id int64, tag pgconn.CommandTag, err error) error {
	if err != nil {
		return db.storeError(op, err)
	}
	if tag.RowsAffected() == 0 {
		return plantstore.Errorf(plantstore.ENOTFOUND, "plant %d not found", id)
	}
	return nil
}
