package postgres

import (
	"context"
	"fmt"

	"github.com/plantstore/plantstore"
)

// Batched reads of one plant. Such a read costs the server little for
// its row and much around it: a round trip, a backend woken, a portal
// bound and an executor started, and a pooled connection held for all
// of it. Under load, gets queued for connections and the server spent
// its CPU on that overhead (BenchmarkGetParallel, 64 goroutines: 59-66
// µs a get, one statement each; 14-15 µs batched by two readers, 15-24
// by one, 19-24 by four). So gets go to a few reader goroutines, as
// creates go to the committers: a reader that is free takes every get
// queued and reads their plants in one statement, id = ANY($1). There is
// no waiting to fill a batch: under light load a batch is one get. A get
// never sees less than it would alone: its batch's statement starts
// after the get was queued, so its snapshot holds every write
// acknowledged before the get began, on this instance or another.

// maxReadBatch bounds a batch of gets.
const maxReadBatch = 256

// DefaultReaders is how many batches of gets may be in flight at once
// when Options.Readers is 0: with two, one batch can be read while the
// next gathers, and a slow read holds up only half the gets.
const DefaultReaders = 2

type getRequest struct {
	ctx  context.Context // the caller's; its get is left out once it ends
	id   int64
	done chan getResult // buffered: a reader never blocks on it
}

func (r getRequest) caller() context.Context { return r.ctx }

type getResult struct {
	plant plantstore.Plant
	err   error
}

// GetPlant returns plant id, or ENOTFOUND. Unless Options.NoReadBatch is
// set, it goes through a reader with the gets queued beside it.
func (db *DB) GetPlant(ctx context.Context, id int64) (plantstore.Plant, error) {
	if db.gets == nil {
		return db.getOne(ctx, id)
	}
	if err := ctx.Err(); err != nil {
		return plantstore.Plant{}, db.storeError(getOp(id), err)
	}
	req := getRequest{ctx: ctx, id: id, done: make(chan getResult, 1)}
	if err := enqueue(db, ctx, db.gets, req); err != nil {
		return plantstore.Plant{}, db.storeError(getOp(id), err)
	}
	select {
	case r := <-req.done:
		return r.plant, r.err
	case <-ctx.Done():
		return plantstore.Plant{}, db.storeError(getOp(id), ctx.Err())
	}
}

func getOp(id int64) string { return fmt.Sprintf("get plant %d", id) }

// reader runs until gets is closed, reading what it finds queued.
func (db *DB) reader() {
	batch := make([]getRequest, 0, maxReadBatch)
	ids := make([]int64, 0, maxReadBatch)
	found := make(map[int64]plantstore.Plant, maxReadBatch)
	for first := range db.gets {
		batch = gather(db.gets, append(batch[:0], first), maxReadBatch)
		db.read(batch, ids, found)
		clear(batch) // let the callers' contexts go
		clear(found)
	}
}

// read reads the plants of batch in one statement and answers each
// request. ids and found are the reader's, reused from batch to batch.
func (db *DB) read(batch []getRequest, ids []int64, found map[int64]plantstore.Plant) {
	live := withoutAbandoned(batch)
	if len(live) == 0 {
		return
	}
	if db.observeReadBatch != nil {
		db.observeReadBatch(len(live))
	}
	ids = ids[:0]
	for _, r := range live {
		ids = append(ids, r.id)
	}
	ctx, stop := batchContext(live)
	err := db.readPlants(ctx, ids, found)
	stop()
	for _, r := range live {
		var res getResult
		switch p, ok := found[r.id]; {
		case err != nil:
			res.err = db.storeError(getOp(r.id), err)
		case ok:
			res.plant = p
		default:
			res.err = plantstore.PlantNotFound(r.id)
		}
		r.done <- res
	}
}

// readPlants puts the stored plants of ids in found.
func (db *DB) readPlants(ctx context.Context, ids []int64, found map[int64]plantstore.Plant) error {
	rows, err := db.pool.Query(ctx, `SELECT id, name, tag FROM plants WHERE id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var p plantstore.Plant
		if err := rows.Scan(&p.ID, &p.Name, &p.Tag); err != nil {
			return err
		}
		found[p.ID] = p
	}
	return rows.Err()
}
