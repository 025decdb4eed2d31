package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/plantstore/plantstore"
)

// CreatePlant inserts p, or finds the plant already stored under p.ID and
// compares contents, in a transaction no other writer can come between
// (writer.go).
func (db *DB) CreatePlant(ctx context.Context, p plantstore.Plant) (bool, error) {
	r := db.submit(ctx, writeRequest{kind: writeCreate, plant: p})
	return r.created, r.err
}

func (db *DB) UpdatePlant(ctx context.Context, p plantstore.Plant, cond plantstore.Precondition) error {
	return db.submit(ctx, writeRequest{kind: writeUpdate, plant: p, cond: cond}).err
}

func (db *DB) DeletePlant(ctx context.Context, id int64, cond plantstore.Precondition) error {
	return db.submit(ctx, writeRequest{kind: writeDelete, plant: plantstore.Plant{ID: id}, cond: cond}).err
}

func (db *DB) GetPlant(ctx context.Context, id int64) (plantstore.Plant, error) {
	if err := ctx.Err(); err != nil { // even a cached plant: the caller's time is up
		return plantstore.Plant{}, storeError(fmt.Sprintf("get plant %d", id), err)
	}
	if db.replica != nil {
		if p, found, ok := db.replica.get(id); ok {
			if !found {
				return plantstore.Plant{}, plantstore.PlantNotFound(id)
			}
			return p, nil
		}
	}
	var gen uint64
	if db.cache != nil {
		var p plantstore.Plant
		var ok bool
		if p, ok, gen = db.cache.get(id); ok {
			return p, nil
		}
	}
	var p plantstore.Plant
	err := db.readDurable(ctx, func(c *rawConn) (err error) {
		p, err = readPlant(c, id)
		return err
	})
	if err != nil {
		return plantstore.Plant{}, storeError(fmt.Sprintf("get plant %d", id), err)
	}
	if db.cache != nil {
		db.cache.fill(p, gen)
	}
	return p, nil
}

// readPlant reads the plant stored under id, or fails with ENOTFOUND: in
// the writer's transaction (its compare step) or on a reader.
func readPlant(c *rawConn, id int64) (plantstore.Plant, error) {
	p := plantstore.Plant{ID: id}
	found := false
	err := c.query(`SELECT name, tag FROM plants WHERE id = ?`, []any{id}, func(v []driver.Value) bool {
		p.Name, p.Tag = v[0].(string), optionalText(v[1])
		found = true
		return false
	})
	if err != nil {
		return plantstore.Plant{}, err
	}
	if !found {
		return plantstore.Plant{}, plantstore.PlantNotFound(id)
	}
	return p, nil
}

// optionalText is a nullable TEXT column as a plant's tag: nil for NULL.
func optionalText(v driver.Value) *string {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	return &s
}

// forget drops ids from the plant cache, after their write has committed
// and before it is acknowledged.
func (db *DB) forget(ids ...int64) {
	if db.cache != nil && len(ids) > 0 {
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
	if err := ctx.Err(); err != nil { // even from the replica: the caller's time is up
		return nil, storeError("list plants", err)
	}
	if opts.Tag == nil && db.replica != nil {
		if plants, ok := db.replica.page(lower, opts.Limit); ok {
			return plants, nil
		}
	}
	query, args := `SELECT id, name, tag FROM plants WHERE id >= ? ORDER BY id LIMIT ?`, []any{lower, int64(opts.Limit)}
	if opts.Tag != nil {
		query, args = `SELECT id, name, tag FROM plants WHERE tag = ? AND id >= ? ORDER BY id LIMIT ?`, []any{*opts.Tag, lower, int64(opts.Limit)}
	}
	plants := make([]plantstore.Plant, 0, min(opts.Limit, 1024))
	// The tags of a page share one slice: one allocation for the page
	// instead of one per tagged plant.
	tags := make([]string, 0, cap(plants))
	err := db.readDurable(ctx, func(c *rawConn) error {
		return c.query(query, args, func(v []driver.Value) bool {
			p := plantstore.Plant{ID: v[0].(int64), Name: v[1].(string)}
			if tag, ok := v[2].(string); ok {
				tags = append(tags, tag)
				p.Tag = &tags[len(tags)-1]
			}
			plants = append(plants, p)
			return true
		})
	})
	if err != nil {
		return nil, storeError("list plants", err)
	}
	return plants, nil
}
