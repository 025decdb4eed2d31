package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/flush"
)

// Durable commits without holding the CPU. With synchronous=FULL, SQLite
// fsyncs the WAL inside COMMIT, and the writer's thread blocks in the
// system call for the disk's flush (about 0.1 ms here). Go lets a
// goroutine in a blocking call keep its P until the runtime's monitor
// takes the P back, 20 µs to 10 ms later, so on one core the handlers
// did not run meanwhile (measured, pinned to one core: 0.47–0.65× the
// baseline's creates with the fsync in COMMIT; 0.87× with no fsync at
// all, which is not an option; BENCHMARKS.md, "Design 6").
//
// So the writer commits each plant batch with synchronous=NORMAL (the
// WAL is written, not synced), then syncs the WAL itself through
// internal/flush, which on Linux waits for the flush as a socket read
// waits, parked, while the handlers run and queue the next batch. Only
// then are the batch's callers answered: a 200 still means the write is
// on stable storage.
//
// What NORMAL gives up is that a committed batch is visible before it is
// durable. The replica and the plant cache learn of a batch only once it
// is synced. Every plant or event read from SQLite waits, after reading,
// until every batch counted by the end of the read is synced (awaitSynced;
// the writer counts a batch before its COMMIT):
// no answer carries a write a crash could still undo. A process other
// than the server reading the file (the CLI) does not wait: it can see a
// write up to one flush before it is durable.
//
// Checkpoints stay safe: in WAL mode NORMAL still syncs the WAL before a
// checkpoint, and the database file once a checkpoint has copied the
// whole WAL, before the WAL is reused (and checkpoint.go).
// The other writers of the file (tokens, webhooks, the schema) keep
// synchronous=FULL: the writer sets NORMAL for its own transactions and
// puts FULL back before the connection returns to the pool (heldConn).
//
// The WAL is synced through a descriptor of our own. SQLite deletes the
// WAL file only when the last connection to the database closes, and a
// DB holds its readers open until Close, so the file synced is the one
// SQLite writes.

// pendingBatch is a committed batch on its way to its callers: their
// results, and the effects (replica, cache, notifications) to make once
// the batch is durable.
type pendingBatch struct {
	results  []writeResult
	outcomes []batchOutcome // one per transaction the batch took (commit's fallback takes several)
	seq      uint64         // db.durable.committed with this batch counted
	busy     error          // the lock the batch waited for is held: no transaction began
}

// durability is the state the writer shares with the readers.
type durability struct {
	wal     *os.File // nil: commits sync themselves (synchronous=FULL)
	flusher *flush.Syncer
	syncWAL func() error // flusher.Sync; tests replace it
	// committed counts the batches committed to the WAL, synced those of
	// them known durable. Only the writer writes them.
	committed atomic.Uint64
	synced    atomic.Uint64
	// advanced is closed, and replaced, each time synced advances or the
	// store faults.
	advanced atomic.Pointer[chan struct{}]
	// fault is the first failed sync, or the store's file found deleted
	// or replaced (identity.go); after it no write is acknowledged and no
	// read from SQLite that waits for a sync answered (awaitSynced).
	fault atomic.Pointer[error]
}

// openWAL opens the WAL file of the database at abs for syncing, and
// syncs its directory once, so the file's name is durable too (SQLite
// does that on a WAL's first sync, which NORMAL commits may not reach).
// It fails when there is no WAL: the caller then keeps FULL commits.
func openWAL(abs string) (*os.File, error) {
	f, err := os.Open(abs + "-wal")
	if err != nil {
		return nil, err
	}
	if err := syncDir(filepath.Dir(abs)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (d *durability) init(wal *os.File) {
	d.wal, d.flusher = wal, flush.New(wal)
	d.syncWAL = d.flusher.Sync
	ch := make(chan struct{})
	d.advanced.Store(&ch)
}

// syncsWAL says whether plant batches commit with synchronous=NORMAL and
// the writer syncs the WAL after them.
func (d *durability) syncsWAL() bool { return d.wal != nil }

func (d *durability) close() {
	if d.wal != nil {
		d.flusher.Close()
		d.wal.Close()
	}
}

// makeDurable syncs the WAL after job's batch committed, unless its
// COMMIT synced it, and wakes the readers waiting for it. Its error is
// the store's fault: a failed sync, after which job's writes may not be
// durable, or the store's file found deleted or replaced (identity.go)
// by the time the sync returned, which a good sync does not mend: it
// went to a file no name reaches.
func (db *DB) makeDurable(job *pendingBatch) error {
	d := &db.durable
	if !d.syncsWAL() {
		return d.faulted()
	}
	err := d.faulted()
	if err == nil {
		if err = d.syncWAL(); err != nil {
			// After a failed fsync the kernel may have dropped the pages
			// it could not write, and a later fsync can succeed without
			// them: nothing committed since the last good sync can be
			// called durable, now or later. The store stops acknowledging
			// writes (and /readyz fails) until it is restarted.
			d.stop("the store's disk failed to save a write; restart the server",
				fmt.Errorf("sqlite: sync %s: %w", d.wal.Name(), err))
			return d.faulted()
		}
		if err = d.faulted(); err == nil {
			d.synced.Store(job.seq)
		}
	}
	d.wake()
	return err
}

// awaitSynced waits until the batches counted in mark (a value of
// committed read after a read from SQLite) are durable, so that no read
// answers with a write a crash could still undo: the writer counts a
// batch before its COMMIT. When they are,
// as they nearly always are, it costs an atomic load.
func (d *durability) awaitSynced(ctx context.Context, mark uint64) error {
	if !d.syncsWAL() {
		return nil // each COMMIT synced
	}
	for {
		ch := d.advanced.Load()
		if d.synced.Load() >= mark {
			return nil
		}
		if err := d.faulted(); err != nil {
			return err
		}
		select {
		case <-*ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stop makes the store's fault an EUNAVAILABLE with msg, for the client,
// and cause, unless it has a fault already, and says whether it did: from
// then on no write is acknowledged and no read waiting for a sync answers
// (awaitSynced).
func (d *durability) stop(msg string, cause error) bool {
	var err error = plantstore.WrapError(plantstore.EUNAVAILABLE, msg, cause)
	first := d.fault.CompareAndSwap(nil, &err)
	if first {
		d.wake()
	}
	return first
}

// wake wakes the readers waiting for synced to advance or for a fault.
func (d *durability) wake() {
	if !d.syncsWAL() {
		return // no reader waits: each COMMIT synced
	}
	ch := make(chan struct{})
	close(*d.advanced.Swap(&ch))
}

// faulted returns the store's fault, a failed WAL sync or a file deleted
// or replaced while open (identity.go), if it has one.
func (d *durability) faulted() error {
	if f := d.fault.Load(); f != nil {
		return *f
	}
	return nil
}

// readDurable runs fn on a reader, and returns only once what fn could
// read is durable (see awaitSynced).
func (db *DB) readDurable(ctx context.Context, fn func(*rawConn) error) error {
	if err := db.readers.with(ctx, fn); err != nil {
		return err
	}
	return db.durable.awaitSynced(ctx, db.committedMark())
}

// committedMark and awaitDurable serve the replica's loader.
func (db *DB) committedMark() uint64 { return db.durable.committed.Load() }

func (db *DB) awaitDurable(mark uint64) error { return db.durable.awaitSynced(db.life, mark) }
