package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plantstore/plantstore"
)

// Batched creates. A create that is its own transaction costs a round trip
// to the server, a commit and a WAL flush, and takes a pooled connection
// for all of it; under load, creates queue for connections and the server
// spends its CPU on per-statement overhead. So creates go to a few
// committer goroutines. A committer that is free takes every create
// queued and inserts them, with their webhook outbox rows, in one
// statement: one round trip, one commit. There is no waiting to fill a
// batch: under light load a batch is one create; under heavy load, the
// creates that queued during the previous commit. The change feed's
// counter lets one batch commit at a time (see DefaultCommitters).

// maxBatch bounds a batch, so one statement's arrays and locks stay small.
const maxBatch = 256

// DefaultCommitters is how many batches of creates may be in flight at
// once when Options.Committers is 0. Every write takes its change-feed
// event ids under the one event_counter row's lock, held until its commit
// is flushed, so batches commit one at a time whatever their number, on
// one instance or several; a second committer only splits the creates
// queued meanwhile into smaller batches that wait for that lock. With one
// a batch, unsplit, holds everything that queued during the last commit:
// the load harness, 64 connections on PostgreSQL, made 11,600-11,800
// creates a second with one committer against 7,600-7,900 with two at one
// instance, and 4,200-5,900 against 3,000-3,700 at three (mean batches 28
// against 17; docs/benchmarks/postgres-committers.txt). Before the change
// feed, two were the best (docs/benchmarks/postgres-batch.txt). The price:
// a batch that waits for a plant's row lock another session holds (in
// practice another write of the same id, committing) holds up the
// creates queued behind it, as SQLite's one writer does, at most until
// its lock_timeout or its earliest deadline.
const DefaultCommitters = 1

type createRequest struct {
	ctx   context.Context // the caller's; its plant is left out once it ends
	plant plantstore.Plant
	done  chan createResult // buffered: a committer never blocks on it
}

func (r createRequest) caller() context.Context { return r.ctx }

// request is what committers and readers are given: a caller's, who may
// give up waiting for it.
type request interface{ caller() context.Context }

// withoutAbandoned removes from batch, in place, the requests whose
// callers gave up: they have had their answers.
func withoutAbandoned[R request](batch []R) []R {
	return slices.DeleteFunc(batch, func(r R) bool { return r.caller().Err() != nil })
}

type createResult struct {
	created bool
	err     error
}

// CreatePlant inserts p unless its id is taken, then compares: the same
// content is a replay, other content ECONFLICT. Unless Options.NoBatch is
// set, it goes through a committer with the creates queued beside it.
// When ctx ends while the create waits for its commit, it answers
// EUNAVAILABLE at once, and the plant may still be stored: a retry is an
// idempotent replay.
func (db *DB) CreatePlant(ctx context.Context, p plantstore.Plant) (bool, error) {
	if db.creates == nil {
		return db.createOne(ctx, p)
	}
	op := fmt.Sprintf("create plant %d", p.ID)
	if err := ctx.Err(); err != nil {
		return false, db.storeError(op, err)
	}
	req := createRequest{ctx: ctx, plant: p, done: make(chan createResult, 1)}
	if err := enqueue(db, ctx, db.creates, req); err != nil {
		return false, db.storeError(op, err)
	}
	select {
	case r := <-req.done:
		return r.created, r.err
	case <-ctx.Done():
		// The create may still commit; a retry is an idempotent replay.
		return false, db.storeError(op, ctx.Err())
	}
}

// createOne runs one create as a transaction of its own, under ctx, with
// retries for serialization failures and deadlocks.
func (db *DB) createOne(ctx context.Context, p plantstore.Plant) (created bool, err error) {
	err = retry(ctx, func(ctx context.Context) error {
		created, err = db.createPlant(ctx, p)
		return err
	})
	return created, db.storeError(fmt.Sprintf("create plant %d", p.ID), err)
}

// enqueue queues req for db's committers or readers on ch, unless the
// store is closed (EUNAVAILABLE) or ctx ends first (its error).
func enqueue[R any](db *DB, ctx context.Context, ch chan<- R, req R) error {
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed.Load() {
		return errClosed
	}
	select {
	case ch <- req:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errClosed answers what comes after Close.
var errClosed = plantstore.Errorf(plantstore.EUNAVAILABLE, "the store is closed")

// runBatches is a committer's or reader's loop, until ch is closed: it
// waits for a request, adds what else is queued on ch without waiting
// for more, up to max requests and, when cost is set, up to budget of
// it, and gives the batch to do. The request that would take a batch past
// the budget heads the next one.
func runBatches[R any](ch <-chan R, max int, cost func(R) int, budget int, do func(batch []R)) {
	batch := make([]R, 0, max)
	var held, none R
	holding := false
	for {
		if holding {
			batch, held, holding = append(batch[:0], held), none, false
		} else if first, ok := <-ch; ok {
			batch = append(batch[:0], first)
		} else {
			return
		}
		spent := 0
		if cost != nil {
			spent = cost(batch[0])
		}
	gathering:
		for len(batch) < max {
			select {
			case r, ok := <-ch:
				if !ok {
					break gathering
				}
				if cost != nil {
					if spent += cost(r); spent > budget {
						held, holding = r, true
						break gathering
					}
				}
				batch = append(batch, r)
			default:
				break gathering
			}
		}
		do(batch)
		clear(batch) // let the callers' contexts go
	}
}

// committer runs until creates is closed, committing what it finds queued.
func (db *DB) committer() { runBatches(db.creates, maxBatch, nil, 0, db.commit) }

// commit runs batch and answers each request. A conflict is an answer, not
// a failure. When the batch fails, the creates it had not settled are
// tried one at a time under their callers' contexts, so that one create's
// fault is not its neighbours'; those it settled keep their answers, as
// each of its statements commits on its own.
func (db *DB) commit(batch []createRequest) {
	// A caller who gave up has had its answer; its plant is left out.
	live := withoutAbandoned(batch)
	if len(live) == 0 {
		return
	}
	ctx, stop := batchContext(live)
	results, settled, err := db.commitBatch(ctx, live)
	stop()
	if db.observeBatch != nil {
		db.observeBatch(len(live))
	}
	for i, req := range live {
		switch {
		case settled[i]:
		case len(live) == 1:
			results[i] = createResult{err: db.storeError(fmt.Sprintf("create plant %d", req.plant.ID), err)}
		default:
			results[i].created, results[i].err = db.createOne(req.ctx, req.plant)
		}
		req.done <- results[i]
	}
}

// batchContext returns the context a batch's statements run under: it
// ends when every caller in batch has given up, so that the server stops
// work nobody waits for (a statement stuck behind a lock, say), and no
// sooner, so that one caller's deadline does not fail its neighbours.
// stop releases it.
func batchContext[R request](batch []R) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var waiting atomic.Int64
	waiting.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, req := range batch {
		stops[i] = context.AfterFunc(req.caller(), func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// commitBatch inserts the plants of batch and settles each request: one
// statement for the inserts and their outbox rows, and, when some ids were
// taken, one read of the stored plants. Each statement commits on its own.
// Of the requests of one id, the first in the batch is the one inserted;
// the others are answered as creates that came just after it. An id that
// was taken at the insert but gone at the read was deleted in between and
// is free again: its requests go round again, as createPlant's do. On an
// error, results holds the answers of the requests settled before it.
func (db *DB) commitBatch(ctx context.Context, batch []createRequest) (results []createResult, settled []bool, err error) {
	results = make([]createResult, len(batch))
	settled = make([]bool, len(batch))
	pending := make([]int, len(batch)) // indexes into batch
	for i := range pending {
		pending[i] = i
	}
	for range insertAttempts {
		first := make(map[int64]int, len(pending)) // id -> its first request
		var candidates []plantstore.Plant
		var deadlines []time.Time
		for _, i := range pending {
			if _, ok := first[batch[i].plant.ID]; !ok {
				first[batch[i].plant.ID] = i
				candidates = append(candidates, batch[i].plant)
				deadlines = append(deadlines, deadlineOf(batch[i].ctx))
			}
		}
		inserted, late, err := db.insertPlants(ctx, candidates, deadlines)
		if err != nil {
			return results, settled, err
		}
		if db.afterInsert != nil {
			db.afterInsert(candidates)
		}
		stored := make(map[int64]plantstore.Plant, len(candidates))
		var taken []int64
		for _, p := range candidates {
			if inserted[p.ID] {
				stored[p.ID] = p
			} else if !late[p.ID] {
				taken = append(taken, p.ID)
			}
		}
		if len(taken) > 0 {
			if err := readPlants(ctx, db.pool, taken, stored); err != nil {
				return results, settled, err
			}
		}
		var again []int
		for _, i := range pending {
			p := batch[i].plant
			s, ok := stored[p.ID]
			created := inserted[p.ID]
			switch {
			case late[p.ID] && first[p.ID] == i:
				results[i] = createResult{err: errLate} // its caller was answered, most likely
			case late[p.ID]:
				again = append(again, i) // a later request of the id, whose turn it is now
				continue
			case !ok:
				again = append(again, i) // deleted since the insert saw it
				continue
			case created && first[p.ID] == i:
				results[i] = createResult{created: true}
			case !s.SameContent(p):
				results[i] = createResult{err: plantstore.Errorf(plantstore.ECONFLICT, "plant %d already exists with other content", p.ID)}
			default:
				results[i] = createResult{} // an idempotent replay of a committed create
			}
			settled[i] = true
		}
		if pending = again; len(pending) == 0 {
			return results, settled, nil
		}
	}
	for _, i := range pending {
		results[i] = createResult{err: plantstore.Errorf(plantstore.EUNAVAILABLE, "plant %d is being created and deleted concurrently; retry", batch[i].plant.ID)}
		settled[i] = true
	}
	return results, settled, nil
}

// insertPlants runs insertPlantsSQL for plants, whose ids are distinct,
// each with the deadline of the caller it is inserted for, and returns the
// ids it inserted and those it left out as late (gate).
func (db *DB) insertPlants(ctx context.Context, plants []plantstore.Plant, deadlines []time.Time) (inserted, late map[int64]bool, err error) {
	// In id order: two batches that share ids then lock them in the same
	// order, and cannot deadlock on each other.
	order := make([]int, len(plants))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(plants[a].ID, plants[b].ID) })
	ids := make([]int64, len(plants))
	names := make([]string, len(plants))
	tags := make([]*string, len(plants))
	events := make([]string, len(plants))
	until := make([]time.Time, len(plants))
	for i, j := range order {
		p := plants[j]
		ids[i], names[i], tags[i], events[i], until[i] = p.ID, p.Name, p.Tag, plantstore.NewEventID(), deadlines[j]
	}
	var insertedIDs, lateIDs []int64
	var enqueued int
	var ev recordedEvents
	// The statement ends by the earliest deadline: a row left in past its
	// caller's would otherwise land after its 503. A batch that fails so
	// is tried a create at a time, each under its own (commit).
	err = retry(ctx, func(ctx context.Context) error {
		return writeRow(ctx, db.pool, slices.MinFunc(until, time.Time.Compare), db.sql.insertPlants, []any{ids, names, tags, events, db.now(), until, db.seen.Load()},
			&insertedIDs, &enqueued, &ev.last, &ev.leapt, &lateIDs)
	})
	if err != nil {
		return nil, nil, err
	}
	if enqueued > 0 && db.enqueued != nil {
		db.enqueued()
	}
	db.recorded(ev)
	return idSet(insertedIDs), idSet(lateIDs), nil
}

// idSet is a set of ids.
func idSet(ids []int64) map[int64]bool {
	set := make(map[int64]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// insertPlantsSQL is insertPlantSQL for many plants: it inserts each plant
// of the arrays ($1 ids, distinct and ascending, $2 names, $3 tags, $4
// webhook event ids, $6 their callers' deadlines) whose id is free and
// whose deadline has not passed by the server's clock (gate) and, for each
// plant it inserted, its event, with ids in the order of the plants', and
// one webhook delivery per active subscriber of plant.created. One
// statement, so one transaction, holds all of them or none. It returns the
// ids inserted, the number of deliveries written, the id of the last
// event recorded (NULL when none) and whether the write leapt ($7: the
// newest event id this instance saw; takeEventIDs), and the ids left out
// as late.
var insertPlantsSQL = `WITH now_at AS MATERIALIZED (SELECT clock_timestamp() AS t), offered AS (
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $6::timestamptz[]) AS u (id, name, tag, event_id, deadline)
	), input AS (
		SELECT o.id, o.name, o.tag, o.event_id FROM offered o, now_at WHERE now_at.t <= o.deadline
	), changed AS (
		INSERT INTO plants (id, name, tag, created_at)
		SELECT id, name, tag, $5::timestamptz FROM input ORDER BY id
		ON CONFLICT (id) DO NOTHING
		RETURNING id, name, tag, created_at
	), ` + takeEventIDs("$7") + `, enqueued AS (
		INSERT INTO webhook_deliveries (subscriber_id, event_id, plant_id, name, tag, created_at, next_attempt_at, event_seq)
		SELECT s.id, e.event_id, e.id, e.name, e.tag, e.created_at, e.created_at, e.seq
		FROM (SELECT i.id, i.name, i.tag, i.created_at, u.event_id,
				c.last - (SELECT count(*) FROM changed) + row_number() OVER (ORDER BY i.id) AS seq
			FROM changed i JOIN input u ON u.id = i.id CROSS JOIN counter c) e
		CROSS JOIN webhook_subscribers s LEFT JOIN webhook_subscriber_events t ON t.subscriber_id = s.id
		WHERE s.disabled_at IS NULL AND coalesce(t.created, true)
		ORDER BY e.id, s.id
		RETURNING 1
	), recorded AS (
		INSERT INTO events (id, type, plant_id, name, tag, at)
		SELECT c.last - (SELECT count(*) FROM changed) + row_number() OVER (ORDER BY i.id),
			'plant.created', i.id, i.name, i.tag, i.created_at
		FROM changed i CROSS JOIN counter c
		RETURNING id
	)
	SELECT (SELECT coalesce(array_agg(id), '{}') FROM changed), (SELECT count(*) FROM enqueued)::int, ` + notifyEvents + `,
		(SELECT coalesce(array_agg(o.id), '{}') FROM offered o, now_at WHERE now_at.t > o.deadline)`

// readPlants adds the plants stored under ids to into. Under READ
// COMMITTED it is a new snapshot, which sees the rows that made the insert
// wait and then do nothing.
func readPlants(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, ids []int64, into map[int64]plantstore.Plant) error {
	rows, err := q.Query(ctx, `SELECT id, name, tag FROM plants WHERE id = ANY($1::bigint[])`, ids)
	if err != nil {
		return err
	}
	var p plantstore.Plant
	_, err = pgx.ForEachRow(rows, []any{&p.ID, &p.Name, &p.Tag}, func() error {
		into[p.ID] = p
		p.Tag = nil // a fresh pointer for the next row's tag
		return nil
	})
	return err
}
