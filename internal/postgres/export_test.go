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

// QueuedReads is how many gets and pages wait for a reader.
func QueuedReads(db *DB) int { return len(db.reads) }

// SetObserveReadBatch makes db call f with how many gets and pages each
// batch of reads holds. Set it before the first read.
func SetObserveReadBatch(db *DB, f func(gets, pages int)) { db.observeReadBatch = f }

// SetReadOnlyRenewal sets how old a read-only session must be to be closed
// when it is given back, until the test ends.
func SetReadOnlyRenewal(t interface{ Cleanup(func()) }, d time.Duration) {
	was := readOnlyRenewal
	readOnlyRenewal = d
	t.Cleanup(func() { readOnlyRenewal = was })
}

// TagPagesSQL is the statement that reads a batch's pages of one tag.
const TagPagesSQL = tagPagesSQL

// MaxReadRows bounds the rows a batch's pages may ask for.
const MaxReadRows = maxReadRows

// StoreTables are the tables checkPrivileges asks about.
var StoreTables = func() (tables []string) {
	for _, tp := range servingPrivileges {
		tables = append(tables, tp.table)
	}
	return tables
}()
