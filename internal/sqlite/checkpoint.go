package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/plantstore/plantstore/internal/faultlog"
)

// Checkpoints off the writer's cycle. SQLite copies the WAL back into the
// database file (a checkpoint) once the WAL has grown past 1,000 pages,
// inside the COMMIT that grew it: the writer waits for the copy and for
// its two syncs (the WAL's, then the database file's), and so does every
// write queued behind it. On one core that stall showed in the creates'
// p99 (BENCHMARKS.md, "Checkpoints off the writer's cycle").
//
// So every checkpointEvery batches the writer wakes a goroutine that runs
// a PASSIVE checkpoint on a connection of its own, beside the writer, as
// WAL allows. PASSIVE copies what no reader still needs and waits for no
// one. The writer's autocheckpoint stays as the backstop: it mostly finds
// the WAL copied already, or the checkpointer at work, and then skips.
//
// Nothing here weakens durability. SQLite syncs the WAL before it copies
// and, once a checkpoint has copied the whole WAL, the database file,
// before the WAL can be reused; a checkpoint copies only committed frames
// and changes no content, so no reader sees anything it would not have
// seen from the WAL. But a checkpoint that copied part of the WAL counts
// those frames copied without syncing the database file; should a later
// checkpoint's sync of it fail, the kernel may drop those pages, and the
// sync after can succeed without them, with the WAL then reused. So a
// failed sync in a checkpoint stops the store as a failed sync of the WAL
// does (durable.go), to be restarted, when SQLite's recovery copies the
// whole WAL again. Any other error (a full disk: the copy stops before it
// counts anything) is logged, and the writer's checkpoints go on.
// SQLite's own checkpoints, in the writer's COMMIT and at the last close,
// report their errors to no one.
//
// Below database/sql, as the plant reads (raw.go): no goroutine per
// statement on the one core.

// checkpointEvery is how many batches the writer commits between two
// wakes of the checkpointer. Measured pinned to one core in the harness:
// every 20 batches the extra syncs cost a tenth of the create rate; every
// 40 or 60 the rate holds and the p99 is lower by a tenth; every 100 it
// is not much lower (BENCHMARKS.md). 60 syncs the database file less
// often under light load.
const checkpointEvery = 60

// checkpointer runs the background checkpoints of a store.
type checkpointer struct {
	conn   *rawConn
	wake   chan struct{} // the writer's call; closed when the writer is done
	done   chan struct{} // closed when the checkpointer has returned
	faults *faultlog.Task
	// batches counts the writer's batches since its last wake; only the
	// writer touches it.
	batches int
	// run runs a checkpoint; tests replace it.
	run func() checkpointResult
	// checkpointed, when set (by tests), receives each checkpoint's
	// outcome.
	checkpointed func(checkpointResult)
}

// checkpointResult is what PRAGMA wal_checkpoint answers.
type checkpointResult struct {
	busy       bool  // another checkpoint was under way (the writer's): nothing copied
	log        int64 // frames in the WAL
	copied     int64 // of them, frames in the database file now (fewer: a reader still needs the rest)
	err        error
	syncFailed bool // err is a failed sync of the database file
}

// startCheckpointer opens the checkpointer's connection and starts it.
func (db *DB) startCheckpointer(connector driver.Connector) error {
	conn, err := connector.Connect(context.Background())
	if err != nil {
		return fmt.Errorf("open the checkpointer's connection: %w", err)
	}
	c := &checkpointer{
		conn:   newRawConn(conn),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		faults: &faultlog.Task{Log: db.log, Msg: "checkpoint the WAL in the background (the writer's own checkpoints go on)"},
	}
	c.run = c.checkpoint
	db.checkpoints = c
	go db.runCheckpoints()
	return nil
}

// batchCommitted counts a batch of the writer's, and wakes the
// checkpointer every checkpointEvery batches. It does not wait: a
// checkpoint still running takes the call for the next one.
func (db *DB) batchCommitted() {
	c := db.checkpoints
	if c == nil {
		return
	}
	if c.batches++; c.batches < checkpointEvery {
		return
	}
	c.batches = 0
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (db *DB) runCheckpoints() {
	c := db.checkpoints
	defer close(c.done)
	for range c.wake {
		if db.durable.faulted() != nil {
			// Writes have stopped, and the WAL is not reused.
			continue
		}
		r := c.run()
		switch {
		case r.syncFailed:
			if db.durable.stop(checkpointFailed, fmt.Errorf("sqlite: checkpoint: %w", r.err)) {
				db.log.Error(checkpointFailed, "err", r.err.Error())
			}
		case r.err != nil:
			c.faults.Failed(r.err)
		default:
			c.faults.Worked()
		}
		if c.checkpointed != nil {
			c.checkpointed(r)
		}
	}
}

func (c *checkpointer) checkpoint() checkpointResult {
	var r checkpointResult
	r.err = c.conn.query(`PRAGMA wal_checkpoint(PASSIVE)`, nil, func(v []driver.Value) bool {
		busy, _ := v[0].(int64)
		r.busy = busy != 0
		r.log, _ = v[1].(int64)
		r.copied, _ = v[2].(int64)
		return false
	})
	r.syncFailed = isFailedSync(r.err)
	return r
}

const checkpointFailed = "the store's disk failed to save a checkpoint; restart the server"

// stopCheckpointer waits for a checkpoint under way, drops one asked for
// and not begun, and closes the connection; the writer must be done.
func (db *DB) stopCheckpointer() error {
	c := db.checkpoints
	if c == nil {
		return nil
	}
	select {
	case <-c.wake:
	default:
	}
	close(c.wake)
	<-c.done
	c.conn.closeStmts()
	return c.conn.conn.Close()
}
