package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
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

// statFile is os.Stat; a variable for the tests, which run as root, whom
// no permission stops.
var statFile = os.Stat

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
		there, err := statFile(f.at)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%s is gone (deleted or moved)", f.at)
		case err != nil:
			// The name cannot be looked up now (a directory's permission
			// taken away for a moment, an I/O error): that says nothing of
			// the file behind it, and stopping for good on it would make a
			// passing fault an outage. A later check tells.
			continue
		case !os.SameFile(f.opened, there):
			return fmt.Errorf("%s is another file than the one the store opened", f.at)
		}
	}
	return nil
}

// checkFiles checks the store's files (see openFiles.check); on the first
// difference it leaves a note beside the store (swapNote), then makes the
// store stop acknowledging and logs why, once. The note comes first: a
// server killed as soon as its writes are refused must leave it.
func (db *DB) checkFiles() {
	if db.durable.faulted() != nil {
		return // stopped already
	}
	cause := db.files.check()
	if cause == nil {
		return
	}
	// A file deleted with nothing in its place leaves its log to the
	// check of leftovers (files.go), which says more.
	var noteErr error
	if _, err := os.Lstat(db.files.mainAt); err == nil {
		if noteErr = writeSwapNote(db.files.mainAt, cause, db.now()); noteErr == nil {
			db.swapNoted.Store(true)
		}
	}
	if db.durable.stop(filesGone, fmt.Errorf("sqlite: %w", cause)) {
		db.filesChanged.Store(true)
		db.log.Error(filesGone, "path", db.files.mainAt, "cause", cause.Error())
		if noteErr != nil {
			db.log.Error("the note of the swapped store could not be written", "path", db.files.mainAt+swapNoteSuffix, "err", noteErr.Error())
		}
	}
}

// A store that found its files swapped keeps its connections to the files
// it opened. Its log, PATH-wal, stays beside whatever is at PATH now:
// SQLite does not remove it when the last connection closes, and a
// process killed (SIGKILL, a crash, a power cut) leaves it anyway. The
// next open would have SQLite apply the old store's log to the new file:
// measured, a store that opens as "malformed", or the old store's last
// writes mixed in. So the store writes a note beside PATH (PATH-swapped)
// when it finds a file there that is not its own, every open refuses
// while the note is there (noSwapNote: the note says what to do), and a
// clean Close empties the log into the file the store opened
// (foldSwappedLog) and then takes the note away (clearSwapNote); restore
// --force, which replaces everything, does too.
const swapNoteSuffix = "-swapped"

// writeSwapNote writes the note, durably: it must outlive the crash it
// is for.
func writeSwapNote(abs string, cause error, now time.Time) error {
	text := fmt.Sprintf("%s\nfound at %s: %v\n", filesGone, now.UTC().Format(time.RFC3339), cause)
	f, err := os.OpenFile(abs+swapNoteSuffix, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		return err
	}
	return syncDir(filepath.Dir(abs))
}

// noSwapNote refuses to open the store at abs while a note says its
// files were swapped under a server that did not close it (see
// swapNoteSuffix).
func noSwapNote(abs string) error {
	note, err := os.ReadFile(abs + swapNoteSuffix)
	if err != nil {
		return nil
	}
	found := ""
	if _, after, ok := strings.Cut(string(note), "\nfound at "); ok {
		found = " (found at " + strings.TrimSpace(after) + ")"
	}
	return fmt.Errorf("%w: %s was replaced, or its log was, while a server had it open%s, and that server did not close it: "+
		"the log beside it (%s-wal, -shm) may be the old store's, which SQLite would apply to the file now there; nothing was opened. "+
		"If that file is the store you want (a backup put there, say), remove %s-wal and %s-shm, then this note, %s. "+
		"To keep the old store's last writes instead, put its file back, then remove the note. Or restore a backup with plantstore restore --force (and --feed-after, as it asks), which clears them all",
		ErrSwapped, abs, found, abs, abs, abs, abs+swapNoteSuffix)
}

// ErrSwapped is the error of an open refused by the note of a swapped
// store (see swapNoteSuffix).
var ErrSwapped = errors.New("refusing to open the store")

// foldSwappedLog, run by Close before the connections close, folds the
// log into the file the store opened and empties it
// (wal_checkpoint(TRUNCATE)), once the store found its files changed.
// SQLite does not remove the log of a file that was swapped when its last
// connection closes (measured: PATH-wal outlived a clean stop); emptied,
// it has nothing left to apply to a file put at PATH. A file moved away
// (not deleted), with or without another in its place, so gets every
// write the store acknowledged, and a deleted log's writes reach the file.
func (db *DB) foldSwappedLog() {
	if !db.filesChanged.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), db.busyTimeout)
	defer cancel()
	var busy, logged, folded int
	err := db.write.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logged, &folded)
	if err == nil && busy != 0 {
		err = errors.New("a reader held the log")
	}
	if err != nil {
		db.log.Error("the log of the swapped store could not be emptied into its file", "path", db.files.walAt, "err", err.Error())
	}
}

// clearSwapNote removes the note once the store closed cleanly, when
// nothing of the old store is left at PATH-wal to meet the file at PATH:
// SQLite removed the log, or foldSwappedLog emptied it, and it is still
// the store's own (a log put there since is not).
func (db *DB) clearSwapNote() {
	if !db.swapNoted.Load() {
		return
	}
	fi, err := os.Lstat(db.files.walAt)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err == nil && fi.Size() == 0 && (db.files.wal == nil || os.SameFile(fi, db.files.wal)):
	default:
		return // the note stays, for the operator
	}
	os.Remove(db.files.mainAt + swapNoteSuffix)
}

// keepLock makes the server's lock file (PATH.lock) again when it is
// removed or replaced while the server runs, as an operator may do who
// takes it for one a crash left: a second serve would otherwise find no
// lock, open the same file and serve it beside this one, each with
// plants in memory the other's writes never reach. Made again within a
// check period, it refuses that second serve as before. One that took
// the new lock first is another server of this store: this one stops
// acknowledging, as when its files are swapped.
func (db *DB) keepLock() {
	if db.soleLock == nil {
		return
	}
	lock, err := relock(db.soleLock, db.files.mainAt)
	if lock != db.soleLock {
		db.soleLock = lock
		db.log.Warn("the store's lock file was removed or replaced while serving: made it again, so no second server opens the store", "path", lock.Name())
	}
	if !errors.Is(err, errLockHeld) {
		db.lockHeldChecks = 0
	}
	switch {
	case errors.Is(err, errLockHeld):
		// Held for a moment by a command that only looks (a token
		// command asks whether a server holds it) or fails at once (a
		// refused restore): another server holds it through checks.
		if db.lockHeldChecks++; db.lockHeldChecks < lockHeldChecks {
			return
		}
		if db.durable.stop(lockTaken, fmt.Errorf("sqlite: %w", err)) {
			db.log.Error(lockTaken, "path", db.files.mainAt+".lock")
		}
	case err != nil && !db.lockWarned:
		db.lockWarned = true
		db.log.Warn("the store's lock file was removed and could not be made again: a second server of this store would not be refused", "err", err.Error())
	}
}

// lockHeldChecks is how many checks in a row must find the lock file made
// again held by another process before keepLock takes it for another
// server: about three quarters of a second.
const lockHeldChecks = 3

// errLockHeld is lockFile's when another process holds the lock.
var errLockHeld = errors.New("another plantstore serve is using")

// lockTaken is the message of the fault a second server of the store
// makes (keepLock).
const lockTaken = "another plantstore serve took this store's lock after its lock file was removed: stop it, then restart this server"

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
			db.keepLock()
		}
	}
}
