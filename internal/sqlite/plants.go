package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/plantstore/plantstore"
)

// CreatePlant inserts p, or finds the plant already stored under p.ID and
// compares contents, inside one immediate transaction so no other writer can
// come between the two.
func (db *DB) CreatePlant(ctx context.Context, p plantstore.Plant) (bool, error) {
	op := fmt.Sprintf("create plant %d", p.ID)
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return false, storeError(op, err)
	}
	defer tx.Rollback()

	res, err := tx.ExecContext(ctx, `INSERT INTO plants (id, name, tag, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`, p.ID, p.Name, nullString(p.Tag), millis(db.now()))
	if err != nil {
		return false, storeError(op, err)
	}
	inserted, err := res.RowsAffected()
	if err != nil {
		return false, storeError(op, err)
	}
	if inserted == 0 {
		existing, err := getPlant(ctx, tx, p.ID)
		if err != nil {
			return false, storeError(op, err)
		}
		if !existing.SameContent(p) {
			return false, plantstore.Errorf(plantstore.ECONFLICT,
				"plant %d already exists with other content", p.ID)
		}
		return false, nil
	}
	if err := tx.Commit(); err != nil {
		return false, storeError(op, err)
	}
	return true, nil
}

func (db *DB) GetPlant(ctx context.Context, id int64) (plantstore.Plant, error) {
	p, err := getPlant(ctx, db.read, id)
	if err != nil {
		return plantstore.Plant{}, storeError(fmt.Sprintf("get plant %d", id), err)
	}
	return p, nil
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getPlant(ctx context.Context, q queryRower, id int64) (plantstore.Plant, error) {
	p := plantstore.Plant{ID: id}
	var tag sql.NullString
	err := q.QueryRowContext(ctx, `SELECT name, tag FROM plants WHERE id = ?`, id).Scan(&p.Name, &tag)
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
