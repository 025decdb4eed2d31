package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/plantstore/plantstore"
)

// Group commit. Durable commits cost an fsync each, and the fsync, not
// SQLite, bounds how many writes a second one connection can commit. So
// the plant writes (creates, updates, deletes) go to one writer goroutine,
// which takes every write waiting when it is free and commits them in one
// transaction: one fsync for the lot. Each caller is answered only after
// the commit that holds its write. There is no waiting to fill a batch:
// under light load a batch is one write; under heavy load, the writes that
// queued during the previous commit.
//
// The writes of one batch were all in flight together, none of them
// answered before another was sent, so any order among them is one their
// callers could have seen; the writer runs the creates first, as
// multi-row inserts, then the updates and deletes in the order they came.

// maxBatch bounds a batch, so one commit's work stays short. It is a power
// of two: creates are inserted in chunks of power-of-two sizes past
// exactRows (see chunkLen).
const (
	maxBatchLog2 = 8
	maxBatch     = 1 << maxBatchLog2
)

// exactRows is the most rows a multi-row INSERT of the writer has for any
// count; above it, counts are powers of two. Each statement costs its
// start and end whatever its rows: in power-of-two chunks, a batch of 31
// creates (16+8+4+2+1, and as many event statements) took 5.4–5.6 µs a
// create against 4.7–5.1 for 32; in one statement 4.8 (BenchmarkCommitChunks).
// Up to 64 rows, every count has its statement: batches rarely outgrow
// the 64 connections of the benchmarks, and the prepared statements stay
// few.
const exactRows = 64

// chunkLen is the number of rows the next multi-row INSERT takes of n.
func chunkLen(n int) int {
	if n <= exactRows {
		return n
	}
	return prevPowerOfTwo(n)
}

// maxYields bounds how often the writer yields to let a batch fill (see
// gather): enough for every runnable handler to queue its write, however
// the scheduler orders them, and a bound on the delay it can add.
const maxYields = 16

type writeKind uint8

const (
	writeCreate writeKind = iota
	writeUpdate
	writeDelete
)

type writeRequest struct {
	kind  writeKind
	plant plantstore.Plant // the plant to create or update; for a delete, its ID
	// cond, when set, must hold for the stored plant for an update or a
	// delete to happen; it is judged in the batch's transaction.
	cond plantstore.Precondition
	// ctx is the caller's: a write whose caller has given up (its request
	// ran out of time) before its transaction begins is not made.
	ctx  context.Context
	done chan writeResult // buffered: the writer never blocks on it
}

// op names the write in errors; only a failed write pays for it.
func (w *writeRequest) op() string {
	verb := [...]string{writeCreate: "create", writeUpdate: "update", writeDelete: "delete"}[w.kind]
	return fmt.Sprintf("%s plant %d", verb, w.plant.ID)
}

type writeResult struct {
	created bool // a create stored a new plant
	err     error
}

// Requests are pooled with their channels: one allocation fewer per write.
// A request goes back to the pool only once its caller has read its
// result, after which the writer no longer holds it.
var writeRequests = sync.Pool{New: func() any { return &writeRequest{done: make(chan writeResult, 1)} }}

// submit queues a plant write for the writer and waits for its commit.
// When ctx ends first, it answers EUNAVAILABLE at once, and the write may
// still commit: a retried create is an idempotent replay, a retried update
// writes the same content again, a retried delete answers 404.
func (db *DB) submit(ctx context.Context, w writeRequest) writeResult {
	if err := db.durable.faulted(); err != nil {
		return writeResult{err: err}
	}
	w.ctx = ctx
	if !db.groupCommit {
		// One transaction per write, synced by its COMMIT; one at a time,
		// so the effects are made in commit order.
		db.directMu.Lock()
		defer db.directMu.Unlock()
		job := db.commit([]*writeRequest{&w})
		db.releaseWriteConn()
		return db.finish(job, db.makeDurable(job))[0]
	}
	if err := ctx.Err(); err != nil {
		return writeResult{err: storeError(w.op(), err)}
	}
	req := writeRequests.Get().(*writeRequest)
	req.kind, req.plant, req.cond, req.ctx = w.kind, w.plant, w.cond, w.ctx
	db.closeMu.RLock()
	if db.closed {
		db.closeMu.RUnlock()
		return writeResult{err: plantstore.Errorf(plantstore.EUNAVAILABLE, "the store is closed")}
	}
	select {
	case db.writes <- req:
	case <-ctx.Done():
		db.closeMu.RUnlock()
		return writeResult{err: storeError(w.op(), ctx.Err())}
	}
	db.closeMu.RUnlock()
	select {
	case r := <-req.done:
		req.plant, req.cond, req.ctx = plantstore.Plant{}, nil, nil
		writeRequests.Put(req)
		return r
	case <-ctx.Done():
		// The write may still commit; the writer still holds req.
		return writeResult{err: storeError(w.op(), ctx.Err())}
	}
}

// writer runs until writes is closed, committing what it finds queued.
// It answers a batch's callers once the batch is durable: after its own
// sync of the WAL (durable.go), or when the COMMIT synced it.
func (db *DB) writer() {
	defer close(db.writerDone)
	batch := make([]*writeRequest, 0, maxBatch)
	defer db.releaseWriteConn()
	for first := range db.writes {
		batch = db.gather(append(batch[:0], first))
		if err := db.durable.faulted(); err != nil {
			// Queued before a sync failed: nothing more is committed.
			db.releaseWriteConn()
			for _, req := range batch {
				req.done <- writeResult{err: err}
			}
			continue
		}
		job := db.commit(batch)
		if db.observeBatch != nil {
			db.observeBatch(len(batch))
		}
		results := db.finish(job, db.makeDurable(job))
		// Before the answers, whose goroutines then run before it.
		db.batchCommitted()
		// Before any answer, so that no caller sees the writer still
		// holding the connection when nothing follows.
		if db.held.batches++; len(db.writes) == 0 || db.held.batches == maxHeldBatches ||
			db.write.Stats().WaitCount != db.held.waits {
			db.releaseWriteConn()
		}
		for i, r := range results {
			batch[i].done <- r
		}
		if job.busy != nil {
			// The writes queued meanwhile have waited up to the busy
			// timeout for the same lock, still held: they fail with it,
			// so that no write waits more than the busy timeout in all.
			db.failQueued(batch[:0], job.busy)
		}
	}
}

// failQueued answers every write queued now with busy, the error of the
// batch that waited for the lock, in each one's own words: a log line
// with a request's id names that request's plant. buf takes the writes.
func (db *DB) failQueued(buf []*writeRequest, busy error) {
	// The driver's error, without the batch's own op.
	code, msg, cause := plantstore.ErrorCode(busy), plantstore.ErrorMessage(busy), busy
	if op, ok := errors.AsType[*opError](busy); ok {
		cause = op.err
	}
	for {
		queued := db.drain(buf[:0])
		for _, req := range queued {
			req.done <- writeResult{err: plantstore.WrapError(code, msg,
				&opError{op: req.op() + ": queued behind a write that waited out the busy timeout", err: cause})}
		}
		if len(queued) < maxBatch {
			return
		}
	}
}

// heldConn is the write pool's one connection while the writer keeps it
// from one batch to the next. A batch commits with synchronous=NORMAL
// (durable.go), and the other writers of the pool (tokens, webhooks)
// count on FULL. Setting the one and restoring the other around each
// batch cost two PRAGMA statements a batch, which SQLite prepares afresh
// on every run: about 13 µs a batch, 1–2% of a create's CPU at batches of
// 30 (BENCHMARKS.md, "After design 8"). So under load the writer keeps
// the connection, at NORMAL, while writes queue behind the batch it
// answers, and gives it back with FULL restored when none do, when
// another writer has begun to wait for it, or after maxHeldBatches in
// any case: database/sql counts waits begun, not waits going on, so a
// writer that began waiting before the connection was taken goes unseen
// until then.
type heldConn struct {
	conn    *sql.Conn // nil: not held
	normal  bool      // its synchronous is NORMAL
	waits   int64     // the pool's WaitCount when taken: a larger one is a writer waiting
	batches int       // committed since taken
	// lockWait, when set, is what is left of the busy timeout after the
	// wait for the connection: the next BEGIN waits that long at most.
	lockWait time.Duration
}

// maxHeldBatches bounds how many batches the writer commits on the
// connection before giving it back: another writer waits that many at
// most (a few milliseconds under load), and the PRAGMAs cost a
// maxHeldBatches-th of what they did.
const maxHeldBatches = 8

// writeConn returns the write connection for a batch: the one held, or
// the pool's, taken and held now.
//
// The pool's other writers (token use, webhook bookkeeping) may be
// waiting, each up to the busy timeout, for a lock another process holds.
// The batch waits for them, and then for the lock, the busy timeout in
// all: a plant write's 503 comes after --busy-timeout, not after one more
// for each write queued before it.
func (db *DB) writeConn() (*sql.Conn, error) {
	if db.held.conn == nil {
		ctx, cancel := context.WithTimeout(db.life, db.busyTimeout)
		began := time.Now()
		conn, err := db.write.Conn(ctx)
		cancel()
		if err != nil {
			if db.life.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				err = errWriteLockWait
			}
			return nil, err
		}
		db.held = heldConn{conn: conn, waits: db.write.Stats().WaitCount}
		if waited := time.Since(began); waited >= time.Millisecond {
			db.held.lockWait = max(time.Millisecond, db.busyTimeout-waited)
		}
	}
	return db.held.conn, nil
}

// errWriteLockWait is a batch's busy timeout spent waiting for the
// server's other writes, themselves waiting for another process's lock.
var errWriteLockWait = errors.New("the busy timeout ran out behind other writes waiting for the lock")

// busyBatch says whether a batch failed for a lock: its transaction
// never began, and each write tried alone would wait for the lock again.
func busyBatch(err error) bool { return isBusy(err) || errors.Is(err, errWriteLockWait) }

// releaseWriteConn gives the held connection back to the pool with
// synchronous=FULL, or has the pool close it when FULL cannot be set.
func (db *DB) releaseWriteConn() {
	h := db.held
	if h.conn == nil {
		return
	}
	db.held = heldConn{}
	if h.normal {
		h.conn.Raw(func(dc any) error {
			if _, err := db.writerConn(dc.(driver.Conn)).exec(`PRAGMA synchronous = FULL`); err != nil {
				// The other writers count on FULL: the pool closes this
				// connection rather than lend it to them.
				return driver.ErrBadConn
			}
			return nil
		})
	}
	h.conn.Close()
}

// gather adds to batch what else is queued. When one P runs everything
// (GOMAXPROCS=1: a 1-vCPU machine, a pinned core), the writer wakes as
// soon as the first handler queues a write and waits, before the other
// runnable handlers, whose requests are read and decoded, have had the CPU
// to queue theirs. Committing then would commit a batch of one, and each
// of the others would wait for a commit of its own: group commit would
// become a commit per write (measured: batches of 1, 2,000 creates a
// second, a p99 over a second). So the writer yields, letting every
// runnable goroutine run, takes what they queued, and yields again while
// yielding brings more. With nothing else runnable a yield returns at
// once: under light load it costs a call into the scheduler.
func (db *DB) gather(batch []*writeRequest) []*writeRequest {
	batch = db.drain(batch)
	for range maxYields {
		if len(batch) == maxBatch {
			break
		}
		n := len(batch)
		runtime.Gosched()
		if batch = db.drain(batch); len(batch) == n {
			break
		}
	}
	return batch
}

// drain adds what is queued now, up to maxBatch.
func (db *DB) drain(batch []*writeRequest) []*writeRequest {
	for len(batch) < maxBatch {
		select {
		case r, ok := <-db.writes:
			if !ok {
				return batch
			}
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// commit runs batch in one transaction and returns each request's
// result, to be reported once the batch is durable (finish). A conflict
// or a missing plant is a result, not a failure: the batch goes on. A
// store fault rolls the batch back; then each request is tried alone, so
// one request's fault is not its neighbours', and a delete refused for
// the cap once more past it (deleteHeadroom).
func (db *DB) commit(batch []*writeRequest) *pendingBatch {
	out, err := db.commitBatch(batch, 0)
	job := &pendingBatch{results: out.results, outcomes: []batchOutcome{out}}
	switch {
	case err != nil && (busyBatch(err) || out.unknown()):
		// No write is tried alone: behind a lock each would wait for it
		// again, and after a COMMIT that failed but may have committed,
		// a delete tried again would answer 404 for its own change.
		if busyBatch(err) {
			job.busy = err
		}
		job.results = make([]writeResult, len(batch))
		for i := range batch {
			job.results[i] = writeResult{err: err}
		}
	case err != nil:
		job.results = make([]writeResult, len(batch))
		var spaceNote string
		for i := range batch {
			if len(batch) > 1 {
				out, err = db.commitBatch(batch[i:i+1], 0)
				job.outcomes = append(job.outcomes, out)
			}
			if db.mayPassCap(batch[i], err) {
				out, err = db.commitBatch(batch[i:i+1], db.maxPages+db.deleteHeadroom())
				job.outcomes = append(job.outcomes, out)
			}
			if err != nil {
				job.results[i] = writeResult{err: db.whichSpace(err, &spaceNote)}
			} else {
				job.results[i] = out.results[0]
			}
		}
	}
	// Every COMMIT of the job was counted before it ran (runBatch).
	job.seq = db.durable.committed.Load()
	if db.afterCommit != nil {
		db.afterCommit()
	}
	return job
}

// finish makes the effects of job's committed transactions, in commit
// order, and returns its callers' results. syncErr is the failure of the
// sync that should have made it durable: then no write of the job is
// acknowledged, and the replica, which may hold what the disk lost, is
// loaded again.
func (db *DB) finish(job *pendingBatch, syncErr error) []writeResult {
	var enqueued, events bool
	for _, out := range job.outcomes {
		if db.replica != nil {
			if out.unknown() || (out.committed && syncErr != nil) {
				db.replica.reset()
			} else if out.committed {
				db.replica.apply(out.changes)
			}
		}
		// An update or delete may have committed even when the batch
		// failed (a fault after COMMIT began): forget their plants either
		// way, before any caller is answered.
		db.forget(out.forget...)
		if out.committed {
			enqueued = enqueued || out.enqueued
			events = events || out.events > 0
		}
	}
	if syncErr == nil {
		if enqueued && db.enqueued != nil {
			db.enqueued()
		}
		if events && db.eventsWritten != nil {
			db.eventsWritten()
		}
	}
	for i := range job.results {
		if syncErr != nil && job.results[i].err == nil {
			job.results[i] = writeResult{err: syncErr}
		}
	}
	return job.results
}

// deleteHeadroom is how many pages past --max-db-bytes a delete may take
// the file: as many again as the cap allows, and 256 KiB at least. Each
// delete writes its event, about as large as the plant it removes (more
// for a plant of a few bytes), and deletes are how a full store is
// emptied: a fixed 256 KiB ran out after some 8,000 deletes, leaving a
// store of small plants that could not be emptied. The pages deletes
// free serve later writes, and --event-retention prunes the events.
func (db *DB) deleteHeadroom() int64 { return max(minDeleteHeadroom, db.maxPages) }

const minDeleteHeadroom = 64

// mayPassCap says whether req, refused with err, is a delete refused for
// the cap on the file's size, to be tried again with deleteHeadroom.
func (db *DB) mayPassCap(req *writeRequest, err error) bool {
	return db.maxPages > 0 && req.kind == writeDelete && plantstore.ErrorCode(err) == plantstore.EINSUFFICIENT
}

// whichSpace adds to err, a write refused for space with the file capped
// (--max-db-bytes), how near the cap the file was: at it, the cap is what
// to raise; below it, the disk is full or the write needed more than the
// cap left (a plant of megabytes, under a raised --max-body-bytes). Other
// errors are left as they are. note is the batch's: its pages are read
// once, through the read pool (the writer may hold the write pool's one
// connection), for at most a second.
func (db *DB) whichSpace(err error, note *string) error {
	if db.maxPages == 0 || plantstore.ErrorCode(err) != plantstore.EINSUFFICIENT {
		return err
	}
	if *note == "" {
		ctx, cancel := context.WithTimeout(db.life, time.Second)
		defer cancel()
		var pages int64
		switch {
		case db.read.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages) != nil:
			*note = "the file's size unknown"
		case pages+minDeleteHeadroom >= db.maxPages:
			*note = fmt.Sprintf("the file reached its cap, --max-db-bytes: %d of %d pages", pages, db.maxPages)
		default:
			*note = fmt.Sprintf("the file is at %d of the %d pages --max-db-bytes allows: the disk is full, or the write needed more than the cap leaves", pages, db.maxPages)
		}
	}
	return fmt.Errorf("%w (%s)", err, *note)
}

// commitBatch runs batch in one transaction on the write connection
// (writeConn: held by the writer, so the other writers of this process,
// tokens and webhooks, queue for it in Go rather than for SQLite's lock)
// and driven below database/sql (see rawConn). It makes none of the
// batch's effects: its outcome says what they are. After a failure the
// connection is given back, to be taken afresh. With maxPages > 0 the
// batch may grow the file to that many pages, past the cap, which is set
// again after it: SQLite keeps a cap no lower than the file's pages.
func (db *DB) commitBatch(batch []*writeRequest, maxPages int64) (out batchOutcome, err error) {
	conn, err := db.writeConn()
	if err != nil {
		return out, storeError(batchOp(batch), err)
	}
	var batchErr error
	rawErr := conn.Raw(func(dc any) error {
		c := db.writerConn(dc.(driver.Conn))
		if db.durable.syncsWAL() && !db.held.normal {
			if _, batchErr = c.exec(`PRAGMA synchronous = NORMAL`); batchErr != nil {
				return nil
			}
			db.held.normal = true
		}
		if wait := db.held.lockWait; wait > 0 {
			// The batch waited for the connection: its BEGIN waits for
			// what is left of the busy timeout (writeConn). Rare: the
			// connection was busy for a millisecond or more.
			db.held.lockWait = 0
			if batchErr = c.execOnce(fmt.Sprintf(`PRAGMA busy_timeout = %d`, wait.Milliseconds())); batchErr != nil {
				return nil
			}
			defer func() {
				if err := c.execOnce(fmt.Sprintf(`PRAGMA busy_timeout = %d`, db.busyTimeout.Milliseconds())); err != nil && batchErr == nil {
					batchErr = err
				}
			}()
		}
		if maxPages > 0 {
			// PRAGMA takes no parameters; these are our own integers.
			if _, batchErr = c.exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, maxPages)); batchErr != nil {
				return nil
			}
			defer func() {
				if _, err := c.exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, db.maxPages)); err != nil && batchErr == nil {
					batchErr = err
				}
			}()
		}
		if out, batchErr = db.runBatch(c, batch); batchErr != nil {
			// A failed statement may have rolled the transaction back
			// already; then this fails too, harmlessly.
			c.exec(`ROLLBACK`)
		}
		return nil
	})
	if batchErr == nil {
		batchErr = rawErr
	}
	if batchErr != nil {
		db.releaseWriteConn()
		if errors.Is(batchErr, driver.ErrBadConn) {
			batchErr = errors.Join(batchErr, sql.ErrConnDone)
		}
		return out, storeError(batchOp(batch), batchErr)
	}
	return out, nil
}

// batchOp names a batch's write in errors; only a failed batch pays for it.
func batchOp(batch []*writeRequest) string {
	if len(batch) == 1 {
		return fmt.Sprintf("write plant %d", batch[0].plant.ID)
	}
	return fmt.Sprintf("write %d plants", len(batch))
}

// writerConn is the rawConn of the write pool's connection dc, with its
// statements prepared; a new one if the pool replaced the connection.
func (db *DB) writerConn(dc driver.Conn) *rawConn {
	if db.writerRaw == nil || db.writerRaw.conn != dc {
		db.writerRaw = newRawConn(dc)
	}
	return db.writerRaw
}

// batchOutcome is what a batch's transaction did: each request's result,
// the ids whose cached plants it changed, its changes in order (the
// events it recorded), whether it recorded events while a subscriber is
// active, whether it got as far as COMMIT, and whether it committed.
type batchOutcome struct {
	results    []writeResult
	forget     []int64
	changes    []plantstore.Event
	enqueued   bool
	events     int
	committing bool
	committed  bool
}

// unknown says whether the batch failed at or after COMMIT: then it may
// have committed.
func (o batchOutcome) unknown() bool { return o.committing && !o.committed }

// runBatch writes batch, and the event of every change it makes, in one
// transaction and commits it.
func (db *DB) runBatch(c *rawConn, batch []*writeRequest) (out batchOutcome, err error) {
	if _, err := c.exec(`BEGIN IMMEDIATE`); err != nil {
		return out, err
	}
	now := millis(db.now())
	out.results = make([]writeResult, len(batch))
	results := out.results
	// A write whose caller has given up is not made: its caller answered
	// 503, and a retry must not find the change made. Judged once the
	// transaction holds the lock, after any wait for it.
	for i, req := range batch {
		if req.ctx != nil {
			if err := req.ctx.Err(); err != nil {
				results[i] = writeResult{err: storeError(req.op(), err)}
			}
		}
	}
	// The batch's changes, in the order they are made: their events get
	// ids in that order.
	events := make([]plantstore.Event, 0, len(batch)) // most batches change each plant once
	creates := make([]int, 0, len(batch))             // indexes in batch
	for i, req := range batch {
		if req.kind == writeCreate && results[i].err == nil {
			creates = append(creates, i)
		}
	}
	for start := 0; start < len(creates); {
		chunk := creates[start : start+chunkLen(len(creates)-start)]
		if err := insertChunk(c, batch, chunk, now); err == nil {
			for _, i := range chunk {
				results[i] = writeResult{created: true}
			}
		} else if !isUniqueViolation(err) {
			return out, err
		} else {
			// An id is taken (or twice in the chunk). The failed statement
			// changed nothing; sort the chunk out one create at a time.
			for _, i := range chunk {
				created, err := insertOrCompare(c, batch[i].plant, now)
				if err != nil && plantstore.ErrorCode(err) != plantstore.ECONFLICT {
					return out, err
				}
				results[i] = writeResult{created: created, err: err}
			}
		}
		for _, i := range chunk {
			if results[i].created {
				events = append(events, plantstore.Event{Type: plantstore.EventCreated, Plant: batch[i].plant})
			}
		}
		start += len(chunk)
	}
	for i, req := range batch {
		if req.kind == writeCreate || results[i].err != nil {
			continue
		}
		ev, err := writeOne(c, req)
		if err != nil && plantstore.ErrorCode(err) != plantstore.ENOTFOUND && plantstore.ErrorCode(err) != plantstore.EPRECONDITION {
			return out, err
		}
		results[i].err = err
		if ev != nil {
			out.forget = append(out.forget, req.plant.ID)
			events = append(events, *ev)
		}
	}
	if err := recordEvents(c, events, now); err != nil {
		return out, err
	}
	out.events = len(events)
	// The events are the outbox (outbox.go): wake the dispatcher when a
	// subscriber may want them.
	if len(events) > 0 {
		if out.enqueued, err = subscribersActive(c); err != nil {
			return out, err
		}
	}
	out.committing, out.changes = true, events
	// Counted before the COMMIT, not before the wait for the lock: a
	// reader that finds the batch in SQLite takes its mark after its read
	// (readDurable), and so waits for this batch's sync; one that cannot
	// have seen it does not wait for a write stuck behind a lock.
	db.durable.committed.Add(1)
	if _, err := c.exec(`COMMIT`); err != nil {
		return out, err
	}
	out.committed = true
	return out, nil
}

// writeOne runs an update or a delete of the batch and returns the event
// of the change it made, nil when it changed nothing: the plant is
// missing (ENOTFOUND), the precondition does not hold (EPRECONDITION), or
// an update gives the plant the content it has.
func writeOne(c *rawConn, req *writeRequest) (*plantstore.Event, error) {
	id := req.plant.ID
	if req.cond != nil {
		// Judged here, in the transaction that writes: nothing can come
		// between the check and the change.
		stored, err := readPlant(c, id)
		if err != nil {
			return nil, err
		}
		if !req.cond(stored) {
			return nil, plantstore.Errorf(plantstore.EPRECONDITION, "plant %d is not in the state the write was conditioned on", id)
		}
	}
	if req.kind == writeUpdate {
		// Only a plant whose content differs is written: the same content
		// again changes nothing and records no event.
		n, err := c.exec(`UPDATE plants SET name = ?1, tag = ?2 WHERE id = ?3 AND (name IS NOT ?1 OR tag IS NOT ?2)`,
			req.plant.Name, req.plant.Tag, id)
		if err != nil {
			return nil, err
		}
		if n == 1 {
			return &plantstore.Event{Type: plantstore.EventUpdated, Plant: req.plant}, nil
		}
		if _, err := readPlant(c, id); err != nil {
			return nil, err // ENOTFOUND, or a fault
		}
		return nil, nil // there, and already so
	}
	var deleted *plantstore.Plant
	err := c.query(`DELETE FROM plants WHERE id = ? RETURNING name, tag`, []any{id}, func(v []driver.Value) bool {
		deleted = &plantstore.Plant{ID: id, Name: v[0].(string), Tag: optionalText(v[1])}
		return false
	})
	if err != nil {
		return nil, err
	}
	if deleted == nil {
		return nil, plantstore.PlantNotFound(id)
	}
	return &plantstore.Event{Type: plantstore.EventDeleted, Plant: *deleted}, nil
}

// insertChunk inserts the plants of the creates chunk (indexes in batch)
// in one multi-row INSERT, which costs SQLite far less than a statement
// per plant. Any id already stored fails the statement with a unique
// violation, and SQLite undoes the statement, not the transaction.
func insertChunk(c *rawConn, batch []*writeRequest, chunk []int, now int64) error {
	args := make([]any, 0, 4*len(chunk))
	at := any(now) // boxed once for the chunk, not once a row
	for _, i := range chunk {
		p := batch[i].plant
		args = append(args, p.ID, p.Name, p.Tag, at)
	}
	_, err := c.exec(multiInsertSQL[len(chunk)], args...)
	return err
}

// multiInsertSQL holds the statements inserting n plants, indexed by n:
// every n chunkLen can return.
var multiInsertSQL = multiRowSQL("INSERT INTO plants (id, name, tag, created_at) VALUES ", "(?, ?, ?, ?)")

func multiRowSQL(insert, row string) (stmts [maxBatch + 1]string) {
	for n := 1; n <= maxBatch; n++ {
		if chunkLen(n) != n {
			continue
		}
		var q strings.Builder
		q.WriteString(insert)
		for i := range n {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString(row)
		}
		stmts[n] = q.String()
	}
	return stmts
}

// prevPowerOfTwo returns the largest power of two not above n (n >= 1).
func prevPowerOfTwo(n int) int { return 1 << (bits.Len(uint(n)) - 1) }

// insertOrCompare inserts p unless its id is taken; then it compares the
// stored plant with p: the same content is a replay, other content
// ECONFLICT.
func insertOrCompare(c *rawConn, p plantstore.Plant, now int64) (bool, error) {
	n, err := c.exec(`INSERT INTO plants (id, name, tag, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		p.ID, p.Name, p.Tag, now)
	if err != nil {
		return false, err
	}
	if n == 1 {
		return true, nil
	}
	existing, err := readPlant(c, p.ID)
	if err != nil {
		return false, err
	}
	if !existing.SameContent(p) {
		return false, plantstore.Errorf(plantstore.ECONFLICT, "plant %d already exists with other content", p.ID)
	}
	return false, nil
}
