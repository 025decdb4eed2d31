// Package sqlite is the embedded storage engine: one SQLite file in WAL mode
// with durable commits, driven through modernc.org/sqlite (pure Go).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/plantstore/plantstore"
)

// Options tune an open store. The zero value is usable.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection (the token CLI, say) before it fails as unavailable.
	// Default 5 s.
	BusyTimeout time.Duration
	// MaxBytes caps the size of the database file (0: no cap). Writes that
	// would grow it further fail with EINSUFFICIENT, as on a full disk.
	MaxBytes int64
	// Now is the clock; default time.Now.
	Now func() time.Time
	// NoGroupCommit commits every create in its own transaction, as a
	// baseline for benchmarks; see writer.go.
	NoGroupCommit bool
	// SoleServer makes this process the only server of the file: Open
	// takes an exclusive lock (PATH.lock), failing if another server holds
	// it, and keeps read plants in memory (see cache.go). The token CLI
	// opens without it.
	SoleServer bool
	// Enqueued, when set, is called after each commit that recorded events
	// while a webhook subscriber is active (or retried deliveries), so a
	// dispatcher can start at once instead of at its next poll. It must
	// not block.
	Enqueued func()
	// ObserveBatch, when set, is told the size of each group commit's
	// batch, plant writes of every kind (for metrics). It must not block.
	ObserveBatch func(writes int)
	// MustExist makes Open fail with ErrNoStore, creating nothing, when
	// there is no store at the path: for the commands that only read or
	// change what is there.
	MustExist bool
	// Created, when set, is told the absolute path of the store Open has
	// just made, so that a new, empty store is never a silent surprise.
	Created func(path string)
	// EventsWritten, when set, is called after each commit that recorded
	// events, so followers of the feed can read them at once. It must not
	// block.
	EventsWritten func()
	// Logger receives what the store finds wrong in the background: its
	// file deleted or replaced while open (identity.go). Default: none.
	Logger *slog.Logger
}

// cachedPlants bounds the plant cache: about 10 MB at most.
const cachedPlants = 100_000

// DB is a plant store in one SQLite file.
type DB struct {
	// SQLite allows one writer at a time. A pool of one connection queues our
	// own writers in Go instead of letting them fail with SQLITE_BUSY, and
	// its transactions begin IMMEDIATE so a write never upgrades a read lock.
	// The plant writer (writer.go) takes it for a run of batches; the token
	// and webhook writes take it between runs.
	write *sql.DB
	// busyTimeout bounds a wait for another process's lock.
	busyTimeout time.Duration
	// maxPages is the write connection's max_page_count (0: no cap);
	// deletes may go past it by deleteHeadroom (writer.go).
	maxPages int64
	// The other reads run in parallel beside the writer, as WAL allows.
	read *sql.DB
	// readers serve the plant reads, below database/sql (raw.go).
	readers readerPool
	now     func() time.Time

	groupCommit bool
	writes      chan *writeRequest
	writerDone  chan struct{}
	durable     durability    // durable.go
	directMu    sync.Mutex    // without group commit: one write at a time
	writerRaw   *rawConn      // the write connection as the writer drives it; only the writer touches it
	held        heldConn      // the write connection while the writer keeps it between batches (writer.go)
	checkpoints *checkpointer // nil without group commit (checkpoint.go)
	// The hot read path of token checks, prepared once.
	tokenByHashStmt *sql.Stmt
	enqueued        func()
	observeBatch    func(int)
	eventsWritten   func()
	// afterCommit, when set (by tests), runs after each batch's COMMIT,
	// before its sync.
	afterCommit func()
	// life ends at Close; the writer's transactions run in it.
	life     context.Context
	stopLife context.CancelFunc

	closeMu sync.RWMutex // held for reading while sending on writes
	closed  bool

	cache   *plantCache // nil unless SoleServer
	replica *replica    // nil unless SoleServer
	// loaded is closed when the replica's loader has returned.
	loaded chan struct{}
	// soleLock is the lock file serve holds (lockSoleServer); the
	// goroutine that checks the files keeps it (keepLock), and says once
	// that it could not (lockWarned).
	soleLock       *os.File
	lockWarned     bool
	lockHeldChecks int // in a row that found the lock another's (keepLock)
	// files are the store's files as it opened them, which it checks
	// its names still name (identity.go); watchDone is closed when the
	// goroutine that checks them has returned.
	files     openFiles
	watchDone chan struct{}
	// filesChanged says the store found its files swapped, so a clean
	// Close folds its log into the file it opened; swapNoted, that it
	// wrote the note of a file put in its place, which Close then takes
	// away (identity.go).
	filesChanged, swapNoted atomic.Bool
	log                     *slog.Logger
}

var _ plantstore.Store = (*DB)(nil)

// Open opens (creating if need be) the store at path and brings its schema
// up to date. A new store's files are created 0600 (see files.go), and a
// symbolic link where SQLite would create a file beside the store is
// refused.
func Open(ctx context.Context, path string, opts Options) (*DB, error) {
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	abs, err := resolve(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := checkDirectory(abs); err != nil {
		return nil, err
	}
	var soleLock *os.File
	var lockCreated bool
	if opts.SoleServer {
		if soleLock, lockCreated, err = lockSoleServer(abs); err != nil {
			return nil, err
		}
	}
	created, err := prepareFiles(abs, opts.MustExist)
	// An empty file is made a store only where a missing one would be.
	empty := err == nil && !created && emptyFile(abs)
	switch {
	case empty && opts.MustExist:
		err = noStoreInEmpty(abs)
	case empty:
		// Made a store now: 0600, as a store plantstore creates.
		err = os.Chmod(abs, 0o600)
	case err == nil && !created:
		err = explained(checkIsStore(ctx, path, abs), abs)
	}
	var db *DB
	if err == nil {
		db, err = open(ctx, path, abs, opts)
		err = explained(err, abs)
	}
	if err != nil {
		if created {
			// A store that failed to open is not left behind, empty.
			for _, suffix := range append([]string{""}, sidecars...) {
				os.Remove(abs + suffix)
			}
		}
		if soleLock != nil {
			dropLock(soleLock, lockCreated)
		}
		return nil, notAStore(path, opts.MustExist, err)
	}
	if (created || empty) && opts.Created != nil {
		opts.Created(abs)
	}
	db.files = captureFiles(abs)
	db.soleLock = soleLock // before the goroutine that keeps it starts
	db.watchDone = make(chan struct{})
	if db.files.watched() {
		go db.watchFiles()
	} else {
		close(db.watchDone)
	}
	if soleLock != nil {
		db.cache = newPlantCache(cachedPlants)
		db.replica = newReplica(replicaBytes)
		db.loaded = make(chan struct{})
		go func() {
			defer close(db.loaded)
			db.replica.load(db.life, db)
		}()
		if err := db.releaseLeases(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	return db, nil
}

func open(ctx context.Context, path, abs string, opts Options) (*DB, error) {
	// synchronous=FULL in WAL mode fsyncs the log at every commit: a commit
	// that returned survives a crash of the process and of the machine.
	common := url.Values{"_pragma": {
		fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()),
		"journal_mode(WAL)",
		"synchronous(FULL)",
		"foreign_keys(ON)",
	}}
	writeQuery := cloneValues(common)
	writeQuery.Set("_txlock", "immediate")
	// A batch's multi-row INSERT keeps a statement journal (to undo the
	// statement alone should it fail); past 64 KiB SQLite spills it to a
	// temporary file, a write system call per page: 12% of a create's
	// CPU with ids spread over the key space. In memory it is a batch's
	// pages at most (BENCHMARKS.md, "Where a create's time goes").
	writeQuery.Add("_pragma", "temp_store(MEMORY)")
	var maxPages int64
	if opts.MaxBytes > 0 {
		// max_page_count is per connection; the writer is the only one
		// that grows the file. SQLite pages are 4096 bytes by default.
		maxPages = max(1, opts.MaxBytes/4096)
		writeQuery.Add("_pragma", fmt.Sprintf("max_page_count(%d)", maxPages))
	}
	readQuery := cloneValues(common)
	readQuery.Add("_pragma", "query_only(ON)")

	write, err := sql.Open("sqlite", dsn(abs, writeQuery))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetConnMaxIdleTime(0)
	db := &DB{write: write, log: opts.Logger, busyTimeout: opts.BusyTimeout, maxPages: maxPages, now: opts.Now, enqueued: opts.Enqueued, observeBatch: opts.ObserveBatch, eventsWritten: opts.EventsWritten}
	// The first connection sets WAL mode, which needs the file to be
	// writable; open the readers only after it. When processes start
	// together on a new file, switching it to WAL and creating the schema
	// can fail with SQLITE_BUSY without waiting; every step is idempotent,
	// so retry until the busy timeout.
	// Another process serving the file (this one is a command-line tool):
	// see migrate.
	underServer := func() bool { return !opts.SoleServer && servedNow(abs) }
	if err := retryBusy(ctx, opts.BusyTimeout, func(ctx context.Context) error { return db.migrate(ctx, underServer) }); err != nil {
		write.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	read, err := sql.Open("sqlite", dsn(abs, readQuery))
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	read.SetMaxOpenConns(2)
	read.SetMaxIdleConns(2)
	db.read = read
	connector, err := sqlite.NewConnector(dsn(abs, readQuery))
	if err == nil {
		db.readers, err = openReaders(connector, max(4, 2*runtime.GOMAXPROCS(0)))
	}
	if err == nil {
		db.tokenByHashStmt, err = read.PrepareContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = ? AND revoked_at IS NULL`)
	}
	if err != nil {
		if db.readers != nil {
			db.readers.close()
		}
		read.Close()
		write.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.life, db.stopLife = context.WithCancel(context.Background())
	db.groupCommit = !opts.NoGroupCommit
	db.writerDone = make(chan struct{})
	if db.groupCommit {
		db.writes = make(chan *writeRequest, 4*maxBatch)
		// Without a WAL to sync (it is there after migrate in WAL mode),
		// commits keep syncing themselves.
		if wal, err := openWAL(abs); err == nil {
			db.durable.init(wal)
		}
		if err := db.startCheckpointer(connector); err != nil {
			// The writer's autocheckpoint still copies the WAL.
			db.log.Warn("checkpoints stay in the writer's cycle", "err", err)
		}
		go db.writer()
	} else {
		close(db.writerDone)
	}
	return db, nil
}

func retryBusy(ctx context.Context, timeout time.Duration, fn func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn(ctx)
		// Only contention passes: a file SQLite cannot open or write
		// stays so, and is said at once.
		if !isBusy(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
	}
}

func dsn(path string, q url.Values) string {
	u := url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}
	return u.String()
}

func cloneValues(v url.Values) url.Values {
	c := url.Values{}
	for k, vs := range v {
		c[k] = append([]string(nil), vs...)
	}
	return c
}

// Close commits the writes already queued, refuses new ones, and releases
// the file.
func (db *DB) Close() error {
	db.closeMu.Lock()
	if db.closed {
		db.closeMu.Unlock()
		return nil
	}
	db.closed = true
	db.closeMu.Unlock()
	if db.groupCommit {
		close(db.writes) // no sender holds closeMu now, and none will send
	}
	<-db.writerDone
	errCheckpointer := db.stopCheckpointer()
	db.durable.close()
	db.stopLife()
	// Before SQLite closes, and so removes its log: that is no fault.
	<-db.watchDone
	// A last look: a file moved in the quarter second since the last
	// check still gets its log folded in (foldSwappedLog).
	db.checkFiles()
	if db.loaded != nil {
		<-db.loaded
	}
	db.tokenByHashStmt.Close()
	db.closeWriterStmts()
	db.foldSwappedLog()
	errReaders := db.readers.close()
	err := errors.Join(errCheckpointer, errReaders, db.read.Close(), db.write.Close())
	db.clearSwapNote()
	if db.soleLock != nil {
		db.soleLock.Close()
	}
	return err
}

// closeWriterStmts finalizes the writer's statements, on the write
// connection they belong to (SQLite keeps a connection with statements
// open after its close, until they are finalized).
func (db *DB) closeWriterStmts() {
	if db.writerRaw == nil {
		return
	}
	conn, err := db.write.Conn(context.Background())
	if err != nil {
		return
	}
	defer conn.Close()
	conn.Raw(func(dc any) error {
		if db.writerRaw.conn == dc {
			db.writerRaw.closeStmts()
		}
		return nil
	})
}

// Ping checks that the store's names still name its files (identity.go)
// and reads from the file through the read pool.
func (db *DB) Ping(ctx context.Context) error {
	db.closeMu.RLock()
	closed := db.closed
	if !closed {
		// Under closeMu: once Close begins, SQLite may remove its log.
		db.checkFiles()
	}
	db.closeMu.RUnlock()
	if closed {
		return plantstore.Errorf(plantstore.EUNAVAILABLE, "the store is closed")
	}
	if err := db.durable.faulted(); err != nil {
		return err
	}
	var n int
	if err := db.read.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil {
		return storeError("ping", err)
	}
	return nil
}

// storeError turns a driver error into a domain error: lock contention, I/O
// faults and a read-only file are the store's faults and worth retrying
// (EUNAVAILABLE), a full disk is EINSUFFICIENT, anything else EINTERNAL. It
// recognises them by SQLite result code, never by message text.
func storeError(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*plantstore.Error](err); ok {
		return err
	}
	wrapped := &opError{op: op, err: err}
	if errors.Is(err, errWriteLockWait) {
		return plantstore.WrapError(plantstore.EUNAVAILABLE, "the store is busy; retry shortly", wrapped)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return plantstore.WrapError(plantstore.EUNAVAILABLE, "the store did not answer in time", wrapped)
	}
	if errors.Is(err, context.Canceled) {
		return plantstore.WrapError(plantstore.EUNAVAILABLE, "the request was cancelled", wrapped)
	}
	if e, ok := errors.AsType[*sqlite.Error](err); ok {
		switch e.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return plantstore.WrapError(plantstore.EUNAVAILABLE, "the store is busy; retry shortly", wrapped)
		case sqlite3.SQLITE_FULL:
			return plantstore.WrapError(plantstore.EINSUFFICIENT, "the store is out of space", wrapped)
		case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL:
			return plantstore.WrapError(plantstore.EUNAVAILABLE, "the store cannot be written now", wrapped)
		}
	}
	return plantstore.WrapError(plantstore.EINTERNAL, "internal error", wrapped)
}

// opError is the driver's error err of the operation op: "sqlite: op:
// err". The writes queued behind a failed batch share its err, under
// their own op (failQueued).
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string { return "sqlite: " + e.op + ": " + e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

// checkIsStore refuses, before anything is written to it, a file that is
// not plantstore's: one that is not SQLite, or a SQLite database with
// tables of its own and no schema_migrations, another program's, to which
// opening as a store would add plantstore's tables and its WAL mode. An
// empty file is a new store's start. Open says in plain words what
// SQLite's errors mean (notAStore).
func checkIsStore(ctx context.Context, path, abs string) error {
	if fi, err := os.Stat(abs); err == nil && fi.Size() == 0 {
		return nil
	}
	db, err := openQueryOnly(abs)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	tables, err := userTables(ctx, db)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	if len(tables) == 0 || slices.Contains(tables, "schema_migrations") {
		return nil
	}
	if len(tables) > 5 {
		tables = append(tables[:5], "…")
	}
	return &otherDatabaseError{path: path, tables: tables}
}

// otherDatabaseError is checkIsStore's for a SQLite database that is not
// a store: another program's.
type otherDatabaseError struct {
	path   string
	tables []string // its first few
}

func (e *otherDatabaseError) Error() string {
	return fmt.Sprintf("%s is a SQLite database of something else (its tables: %s), not a plantstore store; plantstore changed nothing in it: name a new file, or a store plantstore made",
		e.path, strings.Join(e.tables, ", "))
}

// openQueryOnly opens the SQLite file at abs through connections that
// cannot change it.
func openQueryOnly(abs string) (*sql.DB, error) {
	return sql.Open("sqlite", dsn(abs, url.Values{"mode": {"rw"}, "_pragma": {"query_only(ON)"}}))
}

// userTables lists db's tables, SQLite's own left out, by name.
func userTables(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		tables = append(tables, name)
	}
	return tables, rows.Err()
}

// notAStore says plainly that the file at path is not a SQLite database,
// or a damaged one, when err, its opening's failure, says so in SQLite's
// words; any other err is returned as it is. Only an opening that may
// make a store (mustExist false) says where one would be made.
func notAStore(path string, mustExist bool, err error) error {
	e, ok := errors.AsType[*sqlite.Error](err)
	if !ok {
		return err
	}
	switch e.Code() & 0xff {
	case sqlite3.SQLITE_NOTADB:
		if mustExist {
			return fmt.Errorf("%s is not a SQLite database, so not a store (--db names the store's file)", path)
		}
		return fmt.Errorf("%s is not a SQLite database, so not a store (--db names the store's file; where no file is, a new store is made)", path)
	case sqlite3.SQLITE_CORRUPT:
		return fmt.Errorf("the store %s is damaged (%v): restore it from a backup (docs/operations.md, Backups)", path, e)
	}
	return err
}

// isBusy tells lock contention, which waiting may end, from the other
// faults storeError calls unavailable.
func isBusy(err error) bool {
	e, ok := errors.AsType[*sqlite.Error](err)
	return ok && (e.Code()&0xff == sqlite3.SQLITE_BUSY || e.Code()&0xff == sqlite3.SQLITE_LOCKED)
}

func isFailedSync(err error) bool {
	e, ok := errors.AsType[*sqlite.Error](err)
	return ok && e.Code() == sqlite3.SQLITE_IOERR_FSYNC
}

func isUniqueViolation(err error) bool {
	e, ok := errors.AsType[*sqlite.Error](err)
	return ok && (e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

func millis(t time.Time) int64 { return t.UnixMilli() }

func fromMillis(ms sql.NullInt64) time.Time {
	if !ms.Valid {
		return time.Time{}
	}
	return time.UnixMilli(ms.Int64).UTC()
}
