// Package postgres is the shared storage engine: a PostgreSQL database that
// several plantstore processes can serve at once, driven through
// github.com/jackc/pgx/v5 and its pool.
//
// Every read goes to the database (there is no cache: another process may
// have written since), every call runs under its caller's context, and a
// nil error from a write means its transaction has committed durably.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/plantstore/plantstore"
)

// Options tune an open store. The zero value is usable.
type Options struct {
	// MaxConns caps the pool's connections to the server; 0 keeps the
	// URL's pool_max_conns, or else DefaultMaxConns. Size it against the
	// server's max_connections divided by the number of plantstore
	// processes.
	MaxConns int32
	// LockTimeout bounds how long a statement waits for a lock another
	// session holds (PostgreSQL's lock_timeout) before it fails as
	// unavailable; 0 keeps the URL's or the server's setting.
	LockTimeout time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Enqueued, when set, is called after each create that wrote webhook
	// deliveries, so this process's dispatcher can start at once; other
	// processes find them at their next poll. It must not block.
	Enqueued func()
	// NoBatch commits every create in its own transaction, as a baseline
	// for benchmarks; see batch.go.
	NoBatch bool
	// Committers is how many batches of creates may commit at once, each
	// on a pooled connection; 0 means DefaultCommitters. It is capped at
	// half the pool, so that reads always find connections.
	Committers int
	// ObserveBatch, when set, is told the size of each batch of creates
	// (for metrics). It must not block.
	ObserveBatch func(creates int)
	// NoReadBatch reads every plant GetPlant asks for, and every page of
	// ListPlants, in a statement of its own, as a baseline for
	// benchmarks; see reads.go.
	NoReadBatch bool
	// Readers is how many batches of reads may be read at once, each on a
	// pooled connection; 0 means DefaultReaders. It is capped at half of
	// what the committers leave of the pool.
	Readers int
	// EventsWritten, when set, is called after each write of this process
	// that recorded events and, through LISTEN on a connection of its own,
	// whenever another process on the database records some, so that
	// followers of the feed read them at once. It must not block.
	EventsWritten func()
	// Logger receives what goes wrong in the background (the listener);
	// nil discards it.
	Logger *slog.Logger
}

// DefaultMaxConns is the pool size when neither Options nor the URL sets
// one. It was chosen when each create was a transaction of its own (as
// with Options.NoBatch), and PostgreSQL groups the commits of concurrent
// transactions into one WAL flush: more connections, bigger groups. 16
// gave 1.5x the creates per second of pgxpool's default of 4 on a 2-core
// machine (BENCHMARKS.md), and three instances of 16 stay well under
// PostgreSQL's default max_connections of 100.
const DefaultMaxConns = 16

// defaultConnectTimeout bounds the dial and start-up of one connection when
// the URL sets no connect_timeout, so that a server that is down, or a
// host that drops packets, fails a request fast instead of holding it for
// the kernel's TCP timeout.
const defaultConnectTimeout = 5 * time.Second

// A session keeps the settings it started with: one made read-only, or
// given a statement_timeout, by ALTER DATABASE or ALTER ROLE ... SET
// stays so after the DBA resets it. So sessions are renewed:
//   - every defaultConnLifetime (plus up to defaultConnLifetimeJitter,
//     so the pool's do not all go at once), unless the URL sets
//     pool_max_conn_lifetime; pgx's default is an hour;
//   - a read-only one (PostgreSQL 14 and later report
//     default_transaction_read_only and in_hot_standby to the client) once
//     it is readOnlyRenewal old, when it is given back: writes fail on it
//     with 25006, and a new session finds out whether they still must.
const (
	defaultConnLifetime       = 5 * time.Minute
	defaultConnLifetimeJitter = time.Minute
)

var readOnlyRenewal = 5 * time.Second // a variable for the tests

// DB is a plant store in a PostgreSQL database.
type DB struct {
	pool *pgxpool.Pool
	now  func() time.Time
	// secrets are the passwords of the URL, taken out of every error text.
	secrets  []string
	closed   atomic.Bool
	enqueued func()

	// creates feeds the committers (batch.go); nil with Options.NoBatch.
	creates    chan createRequest
	committers sync.WaitGroup
	closeMu    sync.RWMutex // held for reading while sending on creates or reads
	// reads feeds the readers (reads.go); nil with Options.NoReadBatch.
	reads         chan readRequest
	readers       sync.WaitGroup
	observeBatch  func(int)
	eventsWritten func()
	log           *slog.Logger
	// schemaVersion is the version Open found or brought the schema to.
	schemaVersion int
	// sql are the statements that read the timeline (takeEventIDs), or
	// withoutTimeline where the server cannot tell it (checkTimeline);
	// readsTimeline is set once the start has found it can, and new
	// sessions read it.
	sql           timelineStatements
	readsTimeline atomic.Bool
	// seen is the newest event id this instance knows was given: by its
	// writes, or by others' (their notifications). takeEventIDs leaps
	// when the counter is behind it.
	seen atomic.Int64
	// timelineSaid is the last change of timeline logged (newTimeline).
	timelineMu   sync.Mutex
	timelineSaid string

	stopListening context.CancelFunc
	listening     sync.WaitGroup
	// afterInsert, when set (by tests), runs after each batch's insert.
	afterInsert func(candidates []plantstore.Plant)
	// observeReadBatch, when set (by tests), is told how many gets and
	// pages each batch of reads holds.
	observeReadBatch func(gets, pages int)
}

var _ plantstore.Store = (*DB)(nil)

// Open connects to the database at url (postgres:// or postgresql://,
// with any parameter pgx understands) and brings its schema up to date. It
// refuses a database whose schema is newer than this binary knows.
func Open(ctx context.Context, url string, opts Options) (*DB, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	cfg, secrets, err := poolConfig(url, opts)
	if err != nil {
		return nil, err
	}
	// When a caller's context ends mid-statement, pgx returns at once,
	// drops the connection and sends the server a cancel request: the
	// server stops the statement rather than run it on, holding locks or
	// even committing, after its caller was told it failed. pgx's default
	// is what we want.
	db := &DB{sql: withTimeline, now: opts.Now, secrets: secrets, enqueued: opts.Enqueued, observeBatch: opts.ObserveBatch,
		eventsWritten: opts.EventsWritten, log: opts.Logger}
	afterConnect := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if afterConnect != nil {
			if err := afterConnect(ctx, c); err != nil {
				return err
			}
		}
		// Every session after a failover is new: the first to reach the
		// promoted database says so, before a write on it leaps. Not on
		// a standby, where the server would log the refusal.
		if db.readsTimeline.Load() && !readOnly(c.PgConn()) {
			if err := db.readTimeline(ctx, c); err != nil && c.IsClosed() {
				return err
			}
		}
		return nil
	}
	db.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		// NewWithConfig connects nothing unless MinConns asks it to; its
		// errors are of configuration, and may quote it.
		return nil, fmt.Errorf("postgres: %s", withoutSecrets(err.Error(), secrets))
	}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	db.warnIfReadOnly(ctx)
	db.checkTimeline(ctx)
	// Each committer and reader holds a pooled connection only while its
	// statement runs; together they leave at least half the pool to the
	// rest (lists, updates, readiness checks) where it has room.
	committers := 0
	if !opts.NoBatch {
		committers = poolShare(opts.Committers, DefaultCommitters, int(cfg.MaxConns))
		db.creates = make(chan createRequest, 4*maxBatch)
		for range committers {
			db.committers.Go(db.committer)
		}
	}
	if !opts.NoReadBatch {
		db.reads = make(chan readRequest, 4*maxReadBatch)
		for range poolShare(opts.Readers, DefaultReaders, int(cfg.MaxConns)-committers) {
			db.readers.Go(db.reader)
		}
	}
	listenCtx, stop := context.WithCancel(context.Background())
	db.stopListening = stop
	if db.eventsWritten != nil {
		db.listening.Go(func() { db.listen(listenCtx) })
	}
	return db, nil
}

// poolShare is how many workers of a kind to run: n, or def when n is 0
// or less, capped at half of conns, the pooled connections left to them,
// and never none.
func poolShare(n, def, conns int) int {
	if n <= 0 {
		n = def
	}
	return min(n, max(1, conns/2))
}

// IsURL reports whether s names a PostgreSQL database: a URL of scheme
// postgres or postgresql, which is what Open accepts.
func IsURL(s string) bool {
	lower := strings.ToLower(s)
	return strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://")
}

// ErrInvalidURL is the error of Open for a database URL that does not
// parse: a mistake in the configuration, not in the database.
var ErrInvalidURL = errors.New("invalid database URL")

// poolConfig parses url and applies our defaults to what it leaves unset.
// It also returns the passwords to redact from errors: the URL's, or one
// that pgx found in PGPASSWORD or a password file.
func poolConfig(url string, opts Options) (*pgxpool.Config, []string, error) {
	if !IsURL(url) {
		// Not quoted: whatever it is may hold a password.
		return nil, nil, fmt.Errorf("postgres: the database URL must start with postgres:// or postgresql://")
	}
	// A scheme is case-insensitive (RFC 3986, section 3.1), pgx's check
	// of it is not.
	scheme, rest, _ := strings.Cut(url, "://")
	url = strings.ToLower(scheme) + "://" + rest
	secrets, parsed := urlPasswords(url)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx masks the password on a best-effort basis and keeps the URL
		// in clear in the error's fields, so only its text goes on, with
		// the password taken out, and only when we could find it.
		if !parsed {
			return nil, nil, fmt.Errorf("postgres: %w (not shown, as it may hold a password)", ErrInvalidURL)
		}
		// A file the URL names (sslrootcert, sslcert, sslkey) that
		// cannot be read is not a mistake in the URL's form: it fails as
		// any file a command cannot read, not as a usage mistake.
		if _, unreadable := errors.AsType[*os.PathError](err); unreadable {
			return nil, nil, fmt.Errorf("postgres: a file the database URL names cannot be read: %s", withoutSecrets(err.Error(), secrets))
		}
		return nil, nil, fmt.Errorf("postgres: %w: %s", ErrInvalidURL, withoutSecrets(err.Error(), secrets))
	}
	if pw := cfg.ConnConfig.Password; pw != "" {
		secrets = append(secrets, pw)
	}
	setRequireAuth(cfg, url)

	inURL := urlParams(url)
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	} else if !inURL.Has("pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if !inURL.Has("pool_max_conn_lifetime") {
		cfg.MaxConnLifetime = defaultConnLifetime
		if !inURL.Has("pool_max_conn_lifetime_jitter") {
			cfg.MaxConnLifetimeJitter = defaultConnLifetimeJitter
		}
	}
	sessionLifecycle(cfg, opts.Logger)
	newDialGate(cfg.ConnConfig.DialFunc).install(&cfg.ConnConfig.Config)
	params := cfg.ConnConfig.RuntimeParams
	// A nil error from a write promises a durable commit; a session with
	// synchronous_commit=off would acknowledge commits the server may lose
	// in a crash. Setting it on each connection also overrides a database's
	// or role's default of off.
	switch strings.ToLower(params["synchronous_commit"]) {
	case "":
		params["synchronous_commit"] = "on"
	case "off", "false", "no", "0": // the spellings of off that PostgreSQL accepts
		return nil, nil, fmt.Errorf("postgres: synchronous_commit=off would acknowledge writes before they are durable; remove it from the URL")
	}
	if opts.LockTimeout > 0 && params["lock_timeout"] == "" {
		params["lock_timeout"] = strconv.FormatInt(max(opts.LockTimeout.Milliseconds(), 1), 10)
	}
	// So that a DBA can tell our sessions apart in pg_stat_activity.
	if params["application_name"] == "" {
		params["application_name"] = "plantstore"
	}
	return cfg, secrets, nil
}

// urlParams is the parameters url sets itself (none when it does not
// parse as a URL: pgx parsed it already).
func urlParams(raw string) neturl.Values {
	u, err := neturl.Parse(raw)
	if err != nil {
		return nil
	}
	return u.Query()
}

// sessionLifecycle has the pool close, when it is given back, a session
// that reports itself read-only and is readOnlyRenewal old (see
// defaultConnLifetime), and logs at debug level each session's start and
// end: with --log-level debug an operator sees the pool renew its
// sessions (their lifetime, a read-only database, a broken connection).
func sessionLifecycle(cfg *pgxpool.Config, log *slog.Logger) {
	const born, closing = "plantstore.born", "plantstore.closing"
	debug := log != nil && log.Enabled(context.Background(), slog.LevelDebug)
	afterConnect := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		pc := c.PgConn()
		pc.CustomData()[born] = time.Now()
		if afterConnect != nil {
			if err := afterConnect(ctx, c); err != nil {
				return err
			}
		}
		if debug {
			log.Debug("database session started", "server_pid", pc.PID(), "host", pc.Conn().RemoteAddr().String(),
				"read_only", readOnly(pc))
		}
		return nil
	}
	afterRelease := cfg.AfterRelease
	cfg.AfterRelease = func(c *pgx.Conn) bool {
		pc := c.PgConn()
		if readOnly(pc) {
			if t, ok := pc.CustomData()[born].(time.Time); ok && time.Since(t) >= readOnlyRenewal {
				pc.CustomData()[closing] = "read-only"
				return false
			}
		}
		if afterRelease != nil {
			return afterRelease(c)
		}
		return true
	}
	if debug {
		beforeClose := cfg.BeforeClose
		cfg.BeforeClose = func(c *pgx.Conn) {
			pc := c.PgConn()
			attrs := []any{"server_pid", pc.PID()}
			if t, ok := pc.CustomData()[born].(time.Time); ok {
				attrs = append(attrs, "age", time.Since(t).Round(time.Millisecond).String())
			}
			if why, ok := pc.CustomData()[closing].(string); ok {
				attrs = append(attrs, "why", why)
			}
			log.Debug("database session closed", attrs...)
			if beforeClose != nil {
				beforeClose(c)
			}
		}
	}
}

// warnIfReadOnly says at the start that the database takes no writes
// (a standby, or default_transaction_read_only): the instance serves
// reads and answers writes 503 until it does, which an instance given a
// replica's address by mistake would otherwise show only in its errors.
func (db *DB) warnIfReadOnly(ctx context.Context) {
	c, err := db.pool.Acquire(ctx)
	if err != nil {
		return // migrate has just connected; a failure now shows in the requests
	}
	defer c.Release()
	if pc := c.Conn().PgConn(); readOnly(pc) {
		db.log.Warn("the database takes no writes (a standby, or default_transaction_read_only): reads are served, writes answer 503 until it takes them",
			"in_hot_standby", pc.ParameterStatus("in_hot_standby"),
			"default_transaction_read_only", pc.ParameterStatus("default_transaction_read_only"))
	}
}

// timelineSQL reads the server's timeline and that of the last write that
// took event ids (takeEventIDs).
const timelineSQL = `SELECT ` + currentTimeline + `, timeline FROM event_counter`

// checkTimeline finds, at the start, whether the server can tell its
// timeline. Where it cannot (a function some services built on PostgreSQL
// lack or refuse), writes take their event ids without comparing
// timelines, and the start says that a failover that loses commits goes
// unnoticed there.
func (db *DB) checkTimeline(ctx context.Context) {
	refused := false
	defer func() { db.readsTimeline.Store(!refused) }()
	c, err := db.pool.Acquire(ctx)
	if err != nil {
		return // migrate has just connected; a failure now shows in the requests
	}
	defer c.Release()
	err = db.readTimeline(ctx, c.Conn())
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok || pgErr.Code == "55000" { // object_not_in_prerequisite_state: a standby, whose timeline shows once promoted
		return
	}
	if code, _ := classify(err); code == plantstore.EUNAVAILABLE {
		return // the server busy or going away: no news of the function
	}
	refused = true
	db.sql = withoutTimeline
	db.log.Warn("the database cannot tell its timeline, so a failover to a standby that lacks the last commits goes unnoticed: see docs/postgres.md, Replicas and failover",
		"error", withoutSecrets(pgErr.Message, db.secrets))
}

// readTimeline reads the server's timeline and says, once for each change,
// when the change feed's last write was on another: the database is a
// promoted standby or a point-in-time recovery, and its next write takes
// its event ids a leap further on.
func (db *DB) readTimeline(ctx context.Context, c *pgx.Conn) error {
	var now, last *string
	if err := c.QueryRow(ctx, timelineSQL).Scan(&now, &last); err != nil {
		return err // an older schema, a standby, or no such function: nothing to say
	}
	if now == nil || last == nil || *now == *last {
		return nil
	}
	change := *last + " " + *now
	db.timelineMu.Lock()
	said := db.timelineSaid == change
	db.timelineSaid = change
	db.timelineMu.Unlock()
	if !said {
		db.log.Warn("the database is on another timeline than the change feed's last write (a standby promoted by a failover or a switchover, or a point-in-time recovery): the next write takes its event ids a leap further on, and clients following the feed get 410 and resync",
			"timeline", *now, "last_write_timeline", *last, "leap", lostEventIDs)
	}
	return nil
}

// readOnly reports whether a session says it cannot write: its database or
// role defaults transactions to read-only, or its server is a standby.
func readOnly(pc *pgconn.PgConn) bool {
	return pc.ParameterStatus("default_transaction_read_only") == "on" || pc.ParameterStatus("in_hot_standby") == "on"
}

// Close commits the creates and reads the gets and pages already queued, and
// refuses new ones; it waits for the connections in use to be released,
// then closes them all. Later calls fail with EUNAVAILABLE.
func (db *DB) Close() error {
	db.closeMu.Lock()
	if db.closed.Load() {
		db.closeMu.Unlock()
		return nil
	}
	db.closed.Store(true)
	db.closeMu.Unlock()
	if db.creates != nil {
		close(db.creates) // no sender holds closeMu now, and none will send
	}
	if db.reads != nil {
		close(db.reads)
	}
	db.committers.Wait()
	db.readers.Wait()
	if db.stopListening != nil {
		db.stopListening()
		db.listening.Wait()
	}
	// The pool says goodbye to the server on each connection, and waits
	// up to 15 s for one that does not answer (pgx's asyncClose): a hung
	// server would hold a shutdown that long past --shutdown-timeout.
	// Past closeWait the process goes on without it; the kernel closes
	// the sockets when it exits.
	closed := make(chan struct{})
	go func() { db.pool.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(closeWait):
	}
	return nil
}

// closeWait bounds how long Close waits for the pool's connections to
// close.
const closeWait = 2 * time.Second

// Ping reads the schema's version on a pooled connection, opening one if
// need be, so it fails when the server does not answer. It reads the
// version, not only a connection's answer: a database put
// in the place of this one (empty, or restored from an older version)
// answers pings but not the requests, and the instance must not be
// counted ready on it.
func (db *DB) Ping(ctx context.Context) error {
	var version int
	err := db.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&version)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42P01" { // undefined_table
		return plantstore.WrapError(plantstore.EUNAVAILABLE, "the database has no plantstore schema: was it replaced?", db.storeError("ping", err))
	}
	if err != nil {
		return db.storeError("ping", err)
	}
	if version < db.schemaVersion {
		return plantstore.Errorf(plantstore.EUNAVAILABLE, "the database's schema is at version %d, below the %d this instance brought it to: was it replaced? Restart plantstore to upgrade it", version, db.schemaVersion)
	}
	return nil
}
