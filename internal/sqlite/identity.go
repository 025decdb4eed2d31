package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/plantstore/plantstore"
)

// An open store keeps writing to the files it opened, whatever their
// names come to mean. Deleted while serving, its file lives on unnamed
// until the process ends, and every write after that is lost with it;
// replaced (mv backup.db PATH), the replacement meets the old log
// (PATH-wal) at the next start, which SQLite replays onto it and
// corrupts it; its log deleted, the writes not yet folded into the file
// are lost at the next crash. Each time a 200 would promise what the
// disk will not keep. So the store checks that PATH and PATH-wal still
// name the files it opened (device and inode), and when one does not,
// it stops acknowledging, as after a failed sync (durable.go).
//
// SQLite never makes the log anew while the store is open: it removes
// PATH-wal only when the last connection to the file, of any process,
// closes (a connection in WAL mode holds a shared lock on the file for
// its whole life, and the closing one checks for others by trying for an
// exclusive one), and the store keeps its readers open until Close
// (raw.go). Everything else it does to the log keeps the file: a
// checkpoint rewrites it from the start, journal_size_limit and
// wal_checkpoint(TRUNCATE) truncate it. So a different file at PATH-wal
// is never SQLite's own doing (TestFilesCheckedIgnoreSQLitesOwnLog).

// filesCheckPeriod is how often a store checks its files. A check is two
// stat calls, a few microseconds: four a second cost nothing measurable,
// and the process already wakes as often to write its log (every
// 200 ms). The period bounds how long writes may still be acknowledged
// into a file that no name reaches, so shorter is better; no period
// closes that window, and a write waiting for a stat would cost every
// request a system call. Ping checks too, so /readyz never says ready on
// a store whose files are gone.
const filesCheckPeriod = 250 * time.Millisecond

// filesGone is the message of the fault a swapped file makes.
const filesGone = "the store's file was deleted or replaced while serving; restart the server"

// openFiles are the files a store opened, as it found them at its names
// once open; nil where it checks nothing (a store without a log, or a
// system without inode numbers: checksFiles).
type openFiles struct {
	main, wal     fs.FileInfo
	mainAt, walAt string
}

// captureFiles records the files at the store's names, abs and its log.
// It runs once the store is open: SQLite holds them from then on.
func captureFiles(abs string) openFiles {
	if !checksFiles {
		return openFiles{}
	}
	of := openFiles{mainAt: abs, walAt: abs + "-wal"}
	of.main, _ = os.Stat(of.mainAt)
	of.wal, _ = os.Stat(of.walAt)
	return of
}

// watched says whether there is anything to check.
func (of openFiles) watched() bool { return of.main != nil || of.wal != nil }

// check returns why a name no longer names the file the store opened, or
// nil while both do.
func (of openFiles) check() error {
	for _, f := range []struct {
		opened fs.FileInfo
		at     string
	}{{of.main, of.mainAt}, {of.wal, of.walAt}} {
		if f.opened == nil {
			continue
		}
		there, err := os.Stat(f.at)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%s is gone (deleted or moved)", f.at)
		case err != nil:
			return fmt.Errorf("%s: %w", f.at, err)
		case !os.SameFile(f.opened, there):
			return fmt.Errorf("%s is another file than the one the store opened", f.at)
		}
	}
	return nil
}

// checkFiles checks the store's files (see openFiles.check); on the first
// difference it makes the store stop acknowledging and logs why, once.
func (db *DB) checkFiles() {
	if db.durable.faulted() != nil {
		return // stopped already
	}
	cause := db.files.check()
	if cause == nil {
		return
	}
	err := plantstore.WrapError(plantstore.EUNAVAILABLE, filesGone, fmt.Errorf("sqlite: %w", cause))
	if db.durable.stop(err) {
		db.log.Error(filesGone, "path", db.files.mainAt, "cause", cause.Error())
	}
}

// watchFiles checks the store's files every filesCheckPeriod until the
// store closes or they differ.
func (db *DB) watchFiles() {
	defer close(db.watchDone)
	tick := time.NewTicker(filesCheckPeriod)
	defer tick.Stop()
	for {
		select {
		case <-db.life.Done():
			return
		case <-tick.C:
			if db.checkFiles(); db.durable.faulted() != nil {
				return
			}
		}
	}
}
