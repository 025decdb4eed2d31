package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/plantstore/plantstore"
)

func (db *DB) GetPlant(ctx context.Context, id int64) (plantstore.Plant, error) {
	var gen uint64
	if db.cache != nil {
		var p plantstore.Plant
		var ok bool
		if p, ok, gen = db.cache.get(id); ok {
			return p, nil
		}
	}
	p, err := scanPlant(id, db.getPlantStmt.QueryRowContext(ctx, id))
	if err != nil {
		return plantstore.Plant{}, storeError(fmt.Sprintf("get plant %d", id), err)
	}
	if db.cache != nil {
		db.cache.fill(p, gen)
	}
	return p, nil
}

// forget drops ids from the plant cache, after their write has committed
// and before it is acknowledged.
func (db *DB) forget(ids ...int64) {
	if db.cache != nil {
		db.cache.invalidate(ids...)
	}
}

// ListPlants reads one page by keyset: "id >= lower" on the primary key,
// or "(tag, id)" on plants_by_tag, so the page's position in the table does
// not change its cost. Both queries are fixed text with parameters.
func (db *DB) ListPlants(ctx context.Context, opts plantstore.ListOptions) ([]plantstore.Plant, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	lower, ok := opts.FirstID()
	if !ok {
		return []plantstore.Plant{}, nil
	}
	var rows *sql.Rows
	var err error
	if opts.Tag != nil {
		rows, err = db.listByTagStmt.QueryContext(ctx, *opts.Tag, lower, opts.Limit)
	} else {
		rows, err = db.listStmt.QueryContext(ctx, lower, opts.Limit)
	}
	if err != nil {
		return nil, storeError("list plants", err)
	}
	defer rows.Close()
	plants := make([]plantstore.Plant, 0, min(opts.Limit, 1024))
	for rows.Next() {
		var p plantstore.Plant
		var tag sql.NullString
		if err := rows.Scan(&p.ID, &p.Name, &tag); err != nil {
			return nil, storeError("list plants", err)
		}
		if tag.Valid {
			p.Tag = &tag.String
		}
		plants = append(plants, p)
	}
	if err := rows.Err(); err != nil {
		return nil, storeError("list plants", err)
	}
	return plants, nil
}

func (db *DB) UpdatePlant(ctx context.Context, p plantstore.Plant) error {
	op := fmt.Sprintf("update plant %d", p.ID)
	res, err := db.write.ExecContext(ctx, `UPDATE plants SET name = ?, tag = ? WHERE id = ?`, p.Name, nullString(p.Tag), p.ID)
	db.forget(p.ID) // whatever the outcome: a failed statement may still have committed
	return rowsOrNotFound(op, p.ID, res, err)
}

func (db *DB) DeletePlant(ctx context.Context, id int64) error {
	op := fmt.Sprintf("delete plant %d", id)
	res, err := db.write.ExecContext(ctx, `DELETE FROM plants WHERE id = ?`, id)
	db.forget(id)
	return rowsOrNotFound(op, id, res, err)
}

// rowsOrNotFound turns a statement's outcome into nil when it changed a
// row and ENOTFOUND when there was none.
func rowsOrNotFound(op string, id int64, res sql.Result, err error) error {
	if err != nil {
		return storeError(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return storeError(op, err)
	}
	if n == 0 {
		return plantstore.Errorf(plantstore.ENOTFOUND, "plant %d not found", id)
	}
	return nil
}

// getPlant reads a plant inside a write transaction (the committer's
// compare step); plain reads use the prepared getPlantStmt.
func getPlant(ctx context.Context, tx *sql.Tx, id int64) (plantstore.Plant, error) {
	return scanPlant(id, tx.QueryRowContext(ctx, `SELECT name, tag FROM plants WHERE id = ?`, id))
}

func scanPlant(id int64, row *sql.Row) (plantstore.Plant, error) {
	p := plantstore.Plant{ID: id}
	var tag sql.NullString
	err := row.Scan(&p.Name, &tag)
	if errors.Is(err, sql.ErrNoRows) {
		return plantstore.Plant{}, plantstore.Errorf(plantstore.ENOTFOUND, "plant %d not found", id)
	}
	if err != nil {
		return plantstore.Plant{}, err
	}
	if tag.Valid {
		p.Tag = &tag.String
	}
	return p, nil
}

func nullString(s *string) sql.NullString {
	if s == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *s, Valid: true}
}
