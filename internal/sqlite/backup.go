package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/plantstore/plantstore/internal/migration"
)

// BackupInfo describes a backup file: what was written, or what is about
// to be restored.
type BackupInfo struct {
	Path          string
	Bytes         int64
	SchemaVersion int
	Plants        int64
	// Tokens and Subscribers count the active tokens and webhook
	// subscribers it holds: a restore brings back those revoked or
	// removed since the backup.
	Tokens, Subscribers int64
	// FeedMovedPast, after a restore, is the newest event of the store
	// replaced (or RestoreOptions.FeedAfter) when its feed went past the
	// backup's (carryEventIDs): the clients that followed it must resync.
	// 0 otherwise.
	FeedMovedPast int64
	// FeedAfter, after a restore, is where the restored change feed goes
	// on: new events get the ids after it.
	FeedAfter int64
	// Checksum is the checksum file (ChecksumSuffix) Backup wrote beside
	// the backup, or the one Restore checked the backup against; "" after
	// a restore from a backup with none beside it.
	Checksum string
}

// Backup writes a consistent copy of the store at from to the new file to,
// while a server and other commands go on using the store. VACUUM INTO
// copies one read transaction's snapshot, so the copy holds every commit
// made before it began and none of the commits after; a writer never
// waits for it. The store is opened as it is, without migrating it, so a
// backup never changes the file it copies. to must not exist: a backup
// never replaces a file. The copy is written beside to under a temporary
// name, synced, checked with PRAGMA integrity_check and only then given
// its name, so a crash never leaves a partial backup under that name.
// Its SHA-256 goes beside it, in to+ChecksumSuffix; a checksum file left
// there by a backup since removed is replaced.
func Backup(ctx context.Context, from, to string, busyTimeout time.Duration) (BackupInfo, error) {
	if fi, err := os.Lstat(to); err == nil && fi.IsDir() {
		return BackupInfo{}, fmt.Errorf("backup to %s: it is a directory; name a new file, in it or elsewhere", to)
	} else if err == nil {
		return BackupInfo{}, fmt.Errorf("backup to %s: %w; a backup never replaces a file", to, fs.ErrExist)
	}
	// A checksum file there already is left by a backup since removed.
	sumName := to + ChecksumSuffix
	staleSum := false
	if fi, err := os.Lstat(sumName); err == nil && fi.IsDir() {
		return BackupInfo{}, fmt.Errorf("backup to %s: %s is a directory, where the backup's checksum file goes; move it away, or name another file", to, sumName)
	} else if err == nil {
		staleSum = true
	}
	abs, err := filepath.Abs(from)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup %s: %w", from, err)
	}
	// Said plainly, rather than SQLite's "unable to open database file".
	f, err := os.Open(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return BackupInfo{}, fmt.Errorf("%w at %s", ErrNoStore, abs)
	case err != nil:
		return BackupInfo{}, fmt.Errorf("backup %s: the store cannot be read: %w", abs, unwrapPath(err))
	}
	f.Close()
	if emptyFile(abs) {
		return BackupInfo{}, noStoreInEmpty(abs)
	}
	if real, err := resolve(abs); err == nil {
		if err := noSwapNote(real); err != nil {
			return BackupInfo{}, err
		}
		// SQLite opens the store's log beside it, creating it if need be.
		if err := checkDirectory(real); err != nil {
			return BackupInfo{}, err
		}
	}
	absTo, err := filepath.Abs(to)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup to %s: %w", to, err)
	}
	tmp, err := tempBeside(absTo)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup to %s: %w", absTo, err)
	}
	defer removeWithSidecars(tmp) // a no-op once the copy has its name

	// mode=rw: open the store only if it exists, never create one.
	live, err := sql.Open("sqlite", dsn(abs, url.Values{
		"mode":    {"rw"},
		"_pragma": {fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds())},
	}))
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup %s: %w", from, err)
	}
	// The file name is a bound parameter, never SQL built from it.
	_, err = live.ExecContext(ctx, `VACUUM INTO ?`, tmp)
	if errClose := live.Close(); err == nil {
		err = errClose
	}
	if e, ok := errors.AsType[*sqlite.Error](err); ok && e.Code()&0xff == sqlite3.SQLITE_FULL {
		// VACUUM INTO writes the copy: the full disk is the target's.
		return BackupInfo{}, fmt.Errorf("backup to %s: the disk it is on is full (%w); nothing was left there", absTo, err)
	}
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup %s: %w", from, err)
	}
	if err := syncFile(tmp); err != nil {
		return BackupInfo{}, fmt.Errorf("backup to %s: %w", to, err)
	}
	info, err := inspect(ctx, tmp)
	if err != nil && ctx.Err() != nil {
		// Not the copy's fault: a good one was being checked.
		return BackupInfo{}, fmt.Errorf("backup to %s: interrupted while the copy was checked; nothing was left there: %w", to, ctx.Err())
	}
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup to %s: the copy failed its check: %w", to, err)
	}
	sum, err := hashFile(tmp)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup to %s: %w", to, err)
	}
	sumPath := absTo + ChecksumSuffix
	sumTmp, err := newTemp(sumPath)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup to %s: %w", to, err)
	}
	defer os.Remove(sumTmp) // a no-op once it has its name
	if err := writeChecksum(sumTmp, sum, filepath.Base(absTo)); err != nil {
		return BackupInfo{}, fmt.Errorf("backup to %s: its checksum: %w", to, err)
	}
	// A checksum file whose backup is gone describes nothing. It goes
	// before the backup takes its name, so that a crash between the two
	// names below leaves a backup without a checksum, never beside the
	// old one's (which a restore would take for a changed backup). Only
	// one that was there at the start: one that came since is another
	// backup's of this name, racing this one.
	if staleSum {
		if err := os.Remove(sumPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return BackupInfo{}, fmt.Errorf("backup to %s: %s: %w", to, sumPath, unwrapPath(err))
		}
		if err := syncDir(filepath.Dir(sumPath)); err != nil {
			return BackupInfo{}, fmt.Errorf("backup to %s: %w", to, err)
		}
	}
	if err := install(tmp, to, false); err != nil {
		return BackupInfo{}, fmt.Errorf("backup to %s: %w", to, err)
	}
	// Past here the backup is whole under its name; a crash leaves its
	// checksum under sumTmp's, synced, to rename by hand.
	if err := os.Rename(sumTmp, sumPath); err != nil {
		return BackupInfo{}, fmt.Errorf("backup to %s: the backup was written, but not its checksum file %s: %w", to, sumPath, unwrapPath(err))
	}
	if err := syncDir(filepath.Dir(sumPath)); err != nil {
		return BackupInfo{}, fmt.Errorf("backup to %s: the backup was written, but its checksum file %s may not outlive a crash: %w", to, sumPath, err)
	}
	info.Path = to
	info.Checksum = sumName
	return info, nil
}

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// Replace lets Restore replace an existing store. Without it, a store
	// at the target is left alone and Restore fails.
	Replace bool
	// FeedAfter, when not nil, is the newest event id a client may have
	// seen from the store or stores the restored one replaces: the change
	// feed goes on after it (and after the replaced store's newest, when
	// that one can be read and is newer). Without it, a replaced store
	// whose feed cannot be read (a damaged one) fails the restore: its
	// newest id is unknown, and the restored feed could give ids again.
	FeedAfter *int64
}

// checkBackupFile refuses what cannot be a backup before Restore touches
// anything, and reads the checksum file beside it (readChecksum).
func checkBackupFile(from string) (sum []byte, sumPath string, err error) {
	if fi, err := os.Stat(from); err != nil {
		return nil, "", unwrapPath(err)
	} else if fi.IsDir() {
		return nil, "", errors.New("it is a directory; name a backup file (plantstore backup --to makes one)")
	} else if fi.Size() == 0 {
		return nil, "", errors.New("the file is empty, not a backup (plantstore backup --to makes one)")
	}
	// A store's main file without its log may lack commits: that is a
	// live store or a copy of one, not a backup.
	if st, err := os.Stat(from + "-wal"); err == nil && st.Size() > 0 {
		return nil, "", fmt.Errorf("%s-wal exists, so it is a live store or a copy of one, not a backup; make one with plantstore backup", from)
	}
	return readChecksum(from)
}

// ErrFeedUnknown is Restore's refusal to replace a store whose change feed
// it cannot read without being told where the feed is to go on
// (RestoreOptions.FeedAfter).
var ErrFeedUnknown = errors.New("the newest event id of the store replaced is unknown")

// ErrStoreExists is Restore's refusal to replace a store it was not told
// to replace.
var ErrStoreExists = errors.New("a store exists there")

// Restore makes the backup at from the store at to. It takes the lock a
// server holds (see Options.SoleServer), so it fails while a server uses
// the store, and no server can start until it is done. The backup is
// copied beside to, synced and checked (against the checksum file beside
// from, when there is one; integrity; a schema no newer than this binary
// knows) before anything at to changes; then the old
// store's write-ahead log and shared-memory files are removed, since
// SQLite would otherwise replay the old log onto the restored file, and
// the copy is renamed into place. Commands such as "token" must not run
// during a restore: one that has the old store open would go on writing
// to it.
func Restore(ctx context.Context, from, to string, opts RestoreOptions) (_ BackupInfo, err error) {
	// The backup first: a mistyped --from is named as such, not after
	// advice about the store it was to replace.
	wantSum, sumPath, err := checkBackupFile(from)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("restore from %s: %w", from, err)
	}
	abs, err := resolve(to)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("restore to %s: %w", to, err)
	}
	// The temporary file first: it fails plainly on a missing directory.
	tmp, err := tempBeside(abs)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("restore to %s: %w", abs, err)
	}
	defer removeWithSidecars(tmp)
	lock, lockCreated, err := lockSoleServer(abs)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("restore to %s: %w; stop the server first", to, err)
	}
	if lock != nil {
		defer func() {
			if err != nil {
				dropLock(lock, lockCreated)
			} else {
				lock.Close()
			}
		}()
	}
	// An empty file is no store (emptyFile): the restore takes its place
	// without --force, as it would a missing one's.
	overEmpty := false
	if fi, err := os.Lstat(abs); err == nil {
		switch {
		case fi.IsDir():
			return BackupInfo{}, fmt.Errorf("restore to %s: it is a directory; name the store's file", to)
		case fi.Mode().IsRegular() && hardLinks(fi) > 1:
			// The copy would take this name alone: the others would keep
			// the old store, and a server under one of them would run it.
			return BackupInfo{}, fmt.Errorf("restore to %s: %w", to, oneName(fi, abs))
		case emptyFile(abs):
			overEmpty = true
		case !opts.Replace:
			return BackupInfo{}, fmt.Errorf("restore to %s: %w", to, ErrStoreExists)
		}
		if err := replaceable(ctx, to, abs); err != nil {
			return BackupInfo{}, fmt.Errorf("restore to %s: %w", to, err)
		}
	} else if !opts.Replace {
		// The log of a store whose file is gone is removed below: only
		// when told to replace, as the store would be.
		if err := noLeftovers(abs); err != nil {
			return BackupInfo{}, fmt.Errorf("restore to %s: %w", to, err)
		}
	}
	sum, err := copyFile(from, tmp)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("restore from %s: %w", from, err)
	}
	if wantSum != nil && !bytes.Equal(sum, wantSum) {
		return BackupInfo{}, fmt.Errorf("restore from %s: %w", from, &ChecksumMismatchError{ChecksumFile: sumPath})
	}
	info, err := inspect(ctx, tmp)
	if err != nil && ctx.Err() != nil {
		// Not the backup's fault: it was being checked.
		return BackupInfo{}, fmt.Errorf("restore from %s: interrupted while the backup was checked; the store was not changed: %w", from, ctx.Err())
	}
	if err != nil {
		return BackupInfo{}, fmt.Errorf("restore from %s: not a usable backup: %w", from, err)
	}
	if wantSum != nil {
		info.Checksum = sumPath
	}
	ms, err := loadMigrations()
	if err != nil {
		return BackupInfo{}, err
	}
	if info.SchemaVersion > len(ms) {
		return BackupInfo{}, fmt.Errorf("restore from %s: %w", from, migration.NewerSchemaError(info.SchemaVersion, len(ms)))
	}
	if opts.Replace && !overEmpty || opts.FeedAfter != nil {
		if info.FeedMovedPast, err = carryEventIDs(ctx, abs, tmp, opts.FeedAfter); err != nil {
			return BackupInfo{}, fmt.Errorf("restore from %s: %w", from, err)
		}
	}
	if info.FeedAfter, err = feedGoesOnAfter(ctx, tmp); err != nil {
		return BackupInfo{}, fmt.Errorf("restore from %s: %w", from, err)
	}
	// inspect closed its connection, which removes these; make sure.
	removeSidecars(tmp)
	if err := removeSidecars(abs); err != nil {
		return BackupInfo{}, fmt.Errorf("restore to %s: %w", to, err)
	}
	if err := install(tmp, abs, opts.Replace || overEmpty); err != nil {
		return BackupInfo{}, fmt.Errorf("restore to %s: %w", to, err)
	}
	// The old store's log is gone with the rest: the note of swapped
	// files (identity.go) has nothing left to warn of.
	os.Remove(abs + swapNoteSuffix)
	info.Path = to
	return info, nil
}

// replaceable refuses to let a restore replace what is not a store, even
// when told to replace: a file that is not a SQLite database, or another
// program's database. A damaged store, the usual reason to restore, is
// replaced: its header outlives most damage.
func replaceable(ctx context.Context, to, abs string) error {
	f, err := os.Open(abs)
	if err != nil {
		return nil // said by the steps that need it
	}
	head := make([]byte, len(sqliteHeader))
	n, _ := io.ReadFull(f, head)
	f.Close()
	if n > 0 && string(head[:n]) != sqliteHeader {
		return fmt.Errorf("%s is not a SQLite database, so not a store; restore replaces only a store, and changed nothing: move the file away first, or name another", to)
	}
	if err := checkIsStore(ctx, to, abs); err != nil {
		if _, ok := errors.AsType[*otherDatabaseError](err); ok {
			return err
		}
	}
	return nil
}

// sqliteHeader begins every SQLite database file.
const sqliteHeader = "SQLite format 3\x00"

// carryEventIDs makes the change feed of the restored copy at restored
// go on after the newest event the store it replaces (at old) gave, when
// that is newer than the copy's own: its ids past the copy's newest stand
// for changes the restore undid. Event ids are never reused, so the
// feed's horizon moves past that newest event, and new ones follow: a
// client whose position came from the replaced store gets 410 and reads
// the plants again, instead of resuming after an id that now means
// another change. It returns that newest event, 0 when the feed was
// left as it was. feedAfter, when not nil, is an id the operator says a
// client may have seen: the feed goes on after it too. A replaced store
// that cannot be read (the reason to restore, it may be) fails it with
// ErrFeedUnknown unless feedAfter says where to go on.
func carryEventIDs(ctx context.Context, old, restored string, feedAfter *int64) (int64, error) {
	var gone int64
	if _, err := os.Stat(old); err == nil {
		var rerr error
		if gone, _, rerr = lastEventID(ctx, old); rerr != nil {
			if feedAfter == nil {
				return 0, fmt.Errorf("%w: the store at %s cannot be read (%v), so the restored change feed could give its event ids again, to other changes, and a client that follows the feed would take them for the ones it saw; give the newest event id a client may have seen with --feed-after ID (any higher id will do), or --feed-after 0 if no client follows the feed", ErrFeedUnknown, old, rerr)
			}
			gone = 0
		}
	}
	if feedAfter != nil {
		gone = max(gone, *feedAfter)
	}
	db, err := sql.Open("sqlite", dsn(restored, url.Values{"mode": {"rw"}}))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	last, feed, err := lastEventIDOf(ctx, db)
	if err != nil || gone <= last {
		return 0, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if feed == noFeed {
		// A copy from before the change feed (schema 1 to 3) starts one
		// when a newer serve migrates it, and those ids too must come
		// after the ones this store gave: the copy carries the horizon
		// for that migration (applyCarriedHorizon) in a table of its own,
		// which the versions without a feed leave alone.
		// (A horizon the copy carried already is below gone: last
		// counts it.)
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS carried_event_horizon (through INTEGER NOT NULL)`); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM carried_event_horizon`); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO carried_event_horizon (through) VALUES (?)`, gone+1); err != nil {
			return 0, err
		}
		return gone, tx.Commit()
	}
	// Past the newest id given, by one: a client that saw that event saw
	// a change undone, and must read the plants again too. No event is
	// held after the horizon, and the next gets the id after it.
	next := gone + 1
	if _, err := tx.ExecContext(ctx, `UPDATE event_horizon SET pruned_through = ?`, next); err != nil {
		return 0, err
	}
	if feed == feedRows {
		// Before the feed's batches (schema 4 to 7): AUTOINCREMENT gives
		// the ids.
		if _, err := tx.ExecContext(ctx, `UPDATE sqlite_sequence SET seq = max(seq, ?1) WHERE name = 'events'`, next); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO sqlite_sequence (name, seq) SELECT 'events', ?1 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events')`, next); err != nil {
			return 0, err
		}
	}
	return gone, tx.Commit()
}

// feedKind is how a store's schema keeps the change feed.
type feedKind int

const (
	noFeed      feedKind = iota // schema 1 to 3
	feedRows                    // a row an event: schema 4 to 7
	feedBatches                 // a row a committed batch
)

// lastEventID is the id of the newest event the store at path gave (0
// without a change feed), and how it keeps its feed.
func lastEventID(ctx context.Context, path string) (int64, feedKind, error) {
	db, err := openQueryOnly(path)
	if err != nil {
		return 0, noFeed, err
	}
	defer db.Close()
	return lastEventIDOf(ctx, db)
}

// feedGoesOnAfter is the id after which the feed of the store at path
// goes on once a serve opens it: its newest, or, for a copy from before
// the feed that carries a horizon, that horizon, where the migration
// starts the feed (applyCarriedHorizon).
func feedGoesOnAfter(ctx context.Context, path string) (int64, error) {
	db, err := openQueryOnly(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	last, _, carried, err := feedPosition(ctx, db)
	return max(last, carried), err
}

func lastEventIDOf(ctx context.Context, db *sql.DB) (int64, feedKind, error) {
	last, feed, carried, err := feedPosition(ctx, db)
	// A copy from before the feed that a restore left unmigrated
	// (carryEventIDs): the ids below the horizon it carries were given,
	// so that a second restore over it carries it on.
	return max(last, carried-1), feed, err
}

// feedPosition reads how the store db keeps its change feed, the newest
// id the feed holds or gave, and the horizon a copy from before the feed
// carries (carryEventIDs; 0 when it carries none).
func feedPosition(ctx context.Context, db *sql.DB) (last int64, feed feedKind, carried int64, err error) {
	tables, err := userTables(ctx, db)
	if err != nil {
		return 0, noFeed, 0, err
	}
	switch {
	case slices.Contains(tables, "event_batches"):
		feed = feedBatches
		err = db.QueryRowContext(ctx, `SELECT `+lastEventSQL).Scan(&last)
	case slices.Contains(tables, "events"):
		feed = feedRows
		err = db.QueryRowContext(ctx, `SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
			coalesce((SELECT max(id) FROM events), 0), (SELECT pruned_through FROM event_horizon))`).Scan(&last)
	}
	if err == nil && slices.Contains(tables, "carried_event_horizon") {
		err = db.QueryRowContext(ctx, `SELECT coalesce(max(through), 0) FROM carried_event_horizon`).Scan(&carried)
	}
	return last, feed, carried, err
}

// inspect checks that the SQLite file at path is whole and a plantstore
// store, and says what it holds. No one else may be using path.
func inspect(ctx context.Context, path string) (BackupInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return BackupInfo{}, err
	}
	abs, err := filepath.Abs(path) // a file: URI needs an absolute path
	if err != nil {
		return BackupInfo{}, err
	}
	db, err := openQueryOnly(abs)
	if err != nil {
		return BackupInfo{}, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `PRAGMA integrity_check`)
	if err != nil {
		return BackupInfo{}, err
	}
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			rows.Close()
			return BackupInfo{}, err
		}
		if line != "ok" && len(problems) < 5 {
			problems = append(problems, line)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return BackupInfo{}, err
	}
	if len(problems) > 0 {
		return BackupInfo{}, fmt.Errorf("integrity check failed: %s", strings.Join(problems, "; "))
	}
	tables, err := userTables(ctx, db)
	if err != nil {
		return BackupInfo{}, err
	}
	if !slices.Contains(tables, "schema_migrations") || !slices.Contains(tables, "plants") {
		return BackupInfo{}, errors.New("it is a SQLite file but not a plantstore store")
	}
	info := BackupInfo{Bytes: st.Size()}
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&info.SchemaVersion); err != nil {
		return BackupInfo{}, err
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM plants`).Scan(&info.Plants); err != nil {
		return BackupInfo{}, err
	}
	if slices.Contains(tables, "tokens") {
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM tokens WHERE revoked_at IS NULL`).Scan(&info.Tokens); err != nil {
			return BackupInfo{}, err
		}
	}
	if slices.Contains(tables, "webhook_subscribers") {
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM webhook_subscribers WHERE disabled_at IS NULL`).Scan(&info.Subscribers); err != nil {
			return BackupInfo{}, err
		}
	}
	return info, nil
}

// tempBeside is newTemp for a file the user named: what is wrong is said
// of path's directory, which must exist and take new files, never with
// the temporary file's name.
func tempBeside(path string) (string, error) {
	dir := filepath.Dir(path)
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("the directory %s does not exist: create it first", dir)
	case err != nil:
		return "", fmt.Errorf("the directory %s: %w", dir, unwrapPath(err))
	case !fi.IsDir():
		return "", fmt.Errorf("%s is a file, not a directory", dir)
	}
	tmp, err := newTemp(path)
	if err != nil {
		return "", fmt.Errorf("cannot create files in %s: %w", dir, unwrapPath(err))
	}
	return tmp, nil
}

// newTemp creates an empty file beside path, on the same file system, so
// it can be renamed to path. Its mode is 0600: a store holds webhook
// secrets and token hashes.
func newTemp(path string) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", err
	}
	return f.Name(), f.Close()
}

// install gives the synced file tmp the name path, and syncs the directory
// so the name survives a crash. Without replace it never replaces a file
// at path: a hard link fails if the name is taken, where a rename would
// replace it.
func install(tmp, path string, replace bool) error {
	if replace {
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		return syncDir(filepath.Dir(path))
	}
	err := os.Link(tmp, path)
	switch {
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%w; it was created meanwhile", err)
	case err != nil:
		// Some file systems have no hard links; check, then rename.
		if _, statErr := os.Lstat(path); statErr == nil {
			return fmt.Errorf("%s: %w", path, fs.ErrExist)
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	default:
		// The new file must keep one name: a store with two is refused
		// (closeOneName).
		if err := os.Remove(tmp); err != nil {
			return fmt.Errorf("%s was made, but its temporary name %s could not be removed (remove it): %w", path, tmp, err)
		}
	}
	return syncDir(filepath.Dir(path))
}

// copyFile copies the file from to the existing file to, syncs it, and
// returns the SHA-256 of what it copied.
func copyFile(from, to string) ([]byte, error) {
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return nil, err
	}
	sum, err := hashInto(dst, from)
	if err != nil {
		dst.Close()
		return nil, err
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return nil, err
	}
	return sum, dst.Close()
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir makes a rename or removal in dir durable. Windows cannot sync a
// directory, and does not need to.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// removeSidecars removes the files SQLite keeps beside a store: its
// write-ahead log, the log's shared-memory index and a rollback journal.
func removeSidecars(path string) error {
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return syncDir(filepath.Dir(path))
}

func removeWithSidecars(path string) {
	os.Remove(path)
	removeSidecars(path)
}
