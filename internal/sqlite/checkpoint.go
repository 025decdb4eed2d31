package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"
	"log/slog"

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
// Nothing here weakens durability. The connection keeps synchronous=FULL,
// so SQLite syncs the WAL before it copies and the database file after,
// before the WAL can be reused; and a checkpoint copies only committed
// frames and changes no content, so no reader sees anything it would not
// have seen from the WAL.
//
// Below database/sql, as the plant reads (raw.go): no goroutine per
// statement on the one core.

// checkpointEvery is how many batches the writer commits between two
// wakes of the checkpointer. Measured pinned to one core in the harness:
// every 20 batches the extra syncs cost about a tenth of the create rate;
// every 60 the rate holds and the p99 is lower (BENCHMARKS.md).
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
	// checkpointed, when set (by tests), receives each checkpoint's
	// outcome.
	checkpointed func(checkpointResult)
}

// checkpointResult is what PRAGMA wal_checkpoint answers.
type checkpointResult struct {
	busy   bool  // the checkpoint could not copy every frame
	log    int64 // frames in the WAL
	copied int64 // of them, frames in the database file now
	err    error
}

// startCheckpointer opens the checkpointer's connection and starts it.
func (db *DB) startCheckpointer(connector driver.Connector, log *slog.Logger) error {
	conn, err := connector.Connect(context.Background())
	if err != nil {
		return fmt.Errorf("open the checkpointer's connection: %w", err)
	}
	db.checkpoints = &checkpointer{
		conn:   newRawConn(conn),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		faults: &faultlog.Task{Log: log, Msg: "checkpoint the WAL in the background (the writer's own checkpoints go on)"},
	}
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
			// Writes have stopped; Close folds the log (identity.go).
			continue
		}
		r := c.checkpoint()
		if r.err != nil {
			c.faults.Failed(r.err)
		} else {
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
	return r
}

// stopCheckpointer waits for a checkpoint under way and closes the
// connection; the writer must be done.
func (db *DB) stopCheckpointer() error {
	c := db.checkpoints
	if c == nil {
		return nil
	}
	close(c.wake)
	<-c.done
	c.conn.closeStmts()
	return c.conn.conn.Close()
}
