package postgres

import (
	"time"

	"github.com/plantstore/plantstore"
)

// SetAfterInsert makes db call f after each batch's insert statement and
// before it reads the ids that were taken, with the plants it tried to
// insert. Set it before the first create.
func SetAfterInsert(db *DB, f func(candidates []plantstore.Plant)) { db.afterInsert = f }

// QueuedCreates is how many creates wait for a committer.
func QueuedCreates(db *DB) int { return len(db.creates) }

// QueuedGets is how many gets wait for a reader.
func QueuedGets(db *DB) int { return len(db.gets) }

// SetObserveReadBatch makes db call f with the size of each batch of gets
// it reads. Set it before the first get.
func SetObserveReadBatch(db *DB, f func(gets int)) { db.observeReadBatch = f }

// SetReadOnlyRenewal sets how old a read-only session must be to be closed
// when it is given back, until the test ends.
func SetReadOnlyRenewal(t interface{ Cleanup(func()) }, d time.Duration) {
	was := readOnlyRenewal
	readOnlyRenewal = d
	t.Cleanup(func() { readOnlyRenewal = was })
}
