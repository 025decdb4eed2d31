package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
	"strings"

	"github.com/plantstore/plantstore"
)

// Group commit. Durable commits cost an fsync each, and the fsync, not
// SQLite, bounds how many creates a second one connection can commit. So
// creates go to one committer goroutine, which takes every create waiting
// when it is free and commits them in one transaction: one fsync for the
// lot. Each caller is answered only after the commit that holds its plant.
// There is no waiting to fill a batch: under light load a batch is one
// create; under heavy load, the creates that queued during the previous
// fsync.

// maxBatch bounds a batch, so one commit's work stays short. It is a power
// of two: a batch is inserted in chunks of power-of-two sizes.
const (
	maxBatchLog2 = 8
	maxBatch     = 1 << maxBatchLog2
)

type createRequest struct {
	plant plantstore.Plant
	done  chan createResult // buffered: the committer never blocks on it
}

type createResult struct {
	created bool
	err     error
}

// CreatePlant inserts p, or finds the plant already stored under p.ID and
// compares contents, in a transaction no other writer can come between.
// When ctx ends while the create waits for its commit, it answers
// EUNAVAILABLE at once, and the plant may still be stored: a retry is an
// idempotent replay.
func (db *DB) CreatePlant(ctx context.Context, p plantstore.Plant) (bool, error) {
	if !db.groupCommit {
		var r createResult
		db.commit([]createRequest{{plant: p}}, func(_ int, res createResult) { r = res })
		return r.created, r.err
	}
	if err := ctx.Err(); err != nil {
		return false, storeError(fmt.Sprintf("create plant %d", p.ID), err)
	}
	req := createRequest{plant: p, done: make(chan createResult, 1)}
	db.closeMu.RLock()
	if db.closed {
		db.closeMu.RUnlock()
		return false, plantstore.Errorf(plantstore.EUNAVAILABLE, "the store is closed")
	}
	select {
	case db.creates <- req:
	case <-ctx.Done():
		db.closeMu.RUnlock()
		return false, storeError(fmt.Sprintf("create plant %d", p.ID), ctx.Err())
	}
	db.closeMu.RUnlock()
	select {
	case r := <-req.done:
		return r.created, r.err
	case <-ctx.Done():
		// The create may still commit; a retry is an idempotent replay.
		return false, storeError(fmt.Sprintf("create plant %d", p.ID), ctx.Err())
	}
}

// committer runs until creates is closed, committing what it finds queued.
func (db *DB) committer() {
	defer close(db.committerDone)
	batch := make([]createRequest, 0, maxBatch)
	for first := range db.creates {
		batch = append(batch[:0], first)
	more:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-db.creates:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		db.commit(batch, func(i int, res createResult) { batch[i].done <- res })
		if db.observeBatch != nil {
			db.observeBatch(len(batch))
		}
	}
}

// commit runs batch in one transaction and reports each request's result.
// A conflict is a result, not a failure: the batch goes on. A store fault
// rolls the batch back; then each request is tried alone, so one request's
// fault is not its neighbours'.
func (db *DB) commit(batch []createRequest, report func(int, createResult)) {
	// Creates leave the plant cache alone: a create never changes a stored
	// plant (the same content is a replay, other content a conflict), and
	// the cache never holds a plant that is not stored.
	results, err := db.commitBatch(batch)
	if err != nil && len(batch) > 1 {
		for i := range batch {
			results, err := db.commitBatch(batch[i : i+1])
			if err != nil {
				results = []createResult{{err: err}}
			}
			report(i, results[0])
		}
		return
	}
	for i := range batch {
		if err != nil {
			report(i, createResult{err: err})
		} else {
			report(i, results[i])
		}
	}
}

func (db *DB) commitBatch(batch []createRequest) ([]createResult, error) {
	ctx := db.life
	op := fmt.Sprintf("create %d plants", len(batch))
	if len(batch) == 1 {
		op = fmt.Sprintf("create plant %d", batch[0].plant.ID)
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, storeError(op, err)
	}
	defer tx.Rollback()
	now := millis(db.now())
	results := make([]createResult, len(batch))
	for start := 0; start < len(batch); {
		chunk := batch[start : start+prevPowerOfTwo(len(batch)-start)]
		if err := db.insertChunk(ctx, tx, chunk, now); err == nil {
			for i := range chunk {
				results[start+i] = createResult{created: true}
			}
		} else if !isUniqueViolation(err) {
			return nil, storeError(op, err)
		} else {
			// An id is taken (or twice in the chunk). The failed statement
			// changed nothing; sort the chunk out one create at a time.
			insert := tx.StmtContext(ctx, db.insertPlant)
			for i, req := range chunk {
				created, err := insertOrCompare(ctx, tx, insert, req.plant, now)
				if err != nil && plantstore.ErrorCode(err) != plantstore.ECONFLICT {
					return nil, storeError(op, err)
				}
				results[start+i] = createResult{created: created, err: err}
			}
		}
		start += len(chunk)
	}
	// The outbox rows commit with the plants, or neither does.
	enqueued, err := db.enqueueEvents(ctx, tx, batch, results, now)
	if err != nil {
		return nil, storeError(op, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, storeError(op, err)
	}
	if enqueued && db.enqueued != nil {
		db.enqueued()
	}
	return results, nil
}

// insertChunk inserts every plant of chunk in one multi-row INSERT, which
// costs SQLite and database/sql far less than a statement per plant. Any
// id already stored fails the statement with a unique violation, and SQLite
// undoes the statement, not the transaction.
func (db *DB) insertChunk(ctx context.Context, tx *sql.Tx, chunk []createRequest, now int64) error {
	stmt := db.multiInserts[bits.TrailingZeros(uint(len(chunk)))]
	args := make([]any, 0, 4*len(chunk))
	for _, req := range chunk {
		args = append(args, req.plant.ID, req.plant.Name, nullString(req.plant.Tag), now)
	}
	_, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args...)
	return err
}

// multiInsertSQL is the statement inserting n plants (n a power of two up to
// maxBatch; each is prepared at open).
func multiInsertSQL(n int) string {
	var q strings.Builder
	q.WriteString("INSERT INTO plants (id, name, tag, created_at) VALUES ")
	for row := range n {
		if row > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?)")
	}
	return q.String()
}

// prevPowerOfTwo returns the largest power of two not above n (n >= 1).
func prevPowerOfTwo(n int) int { return 1 << (bits.Len(uint(n)) - 1) }

// insertOrCompare inserts p unless its id is taken; then it compares the
// stored plant with p: the same content is a replay, other content
// ECONFLICT.
func insertOrCompare(ctx context.Context, tx *sql.Tx, insert *sql.Stmt, p plantstore.Plant, now int64) (bool, error) {
	res, err := insert.ExecContext(ctx, p.ID, p.Name, nullString(p.Tag), now)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, err
	} else if n == 1 {
		return true, nil
	}
	existing, err := getPlant(ctx, tx, p.ID)
	if err != nil {
		return false, err
	}
	if !existing.SameContent(p) {
		return false, plantstore.Errorf(plantstore.ECONFLICT, "plant %d already exists with other content", p.ID)
	}
	return false, nil
}
