package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/app"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/sqlite"
)

// dbFlags are the flags every command shares to reach the store. The
// size cap and the pool size are serve's alone (nil for the others).
type dbFlags struct {
	db          *dbValue
	busyTimeout *time.Duration
	maxBytes    *int64
	maxConns    *int64
}

// addDBFlags declares the store flags of a command-line tool: where the
// store is, and how long a write waits for a lock.
func addDBFlags(fs *flagSet) dbFlags {
	db := &dbValue{raw: "./plantstore.db"}
	fs.fromEnv("db", db)
	fs.Var(db, "db", "the store: the `PATH` of a SQLite file, or a postgres:// URL")
	return dbFlags{
		db:          db,
		busyTimeout: fs.Duration("busy-timeout", 5*time.Second, "how long a write waits for a lock another process holds on the store (SQLite's busy timeout, PostgreSQL's lock_timeout)"),
	}
}

// addServeDBFlags declares serve's store flags: a tool's, and the size
// cap and the pool size.
func addServeDBFlags(fs *flagSet) dbFlags {
	f := addDBFlags(fs)
	fs.Lookup("db").Usage = "the store: the `PATH` of a SQLite file, created if missing, or a postgres:// URL"
	f.maxBytes = fs.Int64("max-db-bytes", 0, "SQLite only: cap on the database file's size; writes beyond it get 507, but deletes may take it up to twice the cap (256 KiB past it at least), to empty a full store (0: no cap)")
	f.maxConns = fs.Int64("db-max-conns", 0, "PostgreSQL only: connections in this process's pool (0: the URL's pool_max_conns, else 16)")
	return f
}

// dbValue is the --db flag. It may be a URL holding a password, so it
// shows itself with the password masked: in the usage text (where a value
// from PLANTSTORE_DB would appear as the default) and in logs.
type dbValue struct {
	raw string
	// mistake, when set, is why raw names no store; check reports it.
	// Set does not return it, because the flag package would quote the
	// value, password and all, in its error.
	mistake string
}

// dsnKeyword finds a libpq keyword/value connection string ("host=db
// user=app password=…"), which plantstore does not take: as a file name
// it would make a SQLite store named after it, password and all, and log
// that name.
var dsnKeyword = regexp.MustCompile(`(?i)(^|\s)(host|hostaddr|port|dbname|user|password|passfile|sslmode|service|connect_timeout|options|target_session_attrs)\s*=`)

func (v *dbValue) Set(s string) error {
	if s == "" {
		// Else SQLite's error about the current directory, which is no file.
		return errors.New("empty: name the store's file or a postgres:// URL (left out, it is ./plantstore.db)")
	}
	v.raw, v.mistake = s, ""
	switch {
	case strings.TrimSpace(s) != s:
		// A stray space or a carriage return from an env file would make
		// a URL a file name, or name another file.
		v.mistake = "--db (PLANTSTORE_DB) begins or ends with a space or a line break; remove it"
	case !postgres.IsURL(s) && dsnKeyword.MatchString(s):
		v.mistake = "--db (PLANTSTORE_DB) looks like a PostgreSQL keyword/value string (host=… user=… password=…); plantstore takes a URL: postgres://user:password@host:5432/dbname (docs/postgres.md)"
	case !postgres.IsURL(s) && otherURL.MatchString(s):
		v.mistake = "--db (PLANTSTORE_DB) looks like a URL, but not one of PostgreSQL's: a database URL begins postgres:// or postgresql:// (docs/postgres.md); a SQLite store is named by its file's path"
	case postgres.IsURL(s) && strings.Contains(s, "#"):
		v.mistake = "--db (PLANTSTORE_DB) holds a #, which would end the URL there: write a # in the password or elsewhere as %23 (and an @ as %40, a / as %2F, a ? as %3F)"
	}
	return nil
}

// otherURL finds a value meant as a URL that is not a PostgreSQL one (a
// scheme mistyped, a slash or the colon missing): as a file name it would
// make a SQLite store named after it, and show its password in the
// error. A scheme is two letters at least, so that a Windows path (C:/…)
// stays a path.
var otherURL = regexp.MustCompile(`(?i)^([a-z][a-z0-9+.-]+:/|postgres(ql)?(:/|//))`)

func (v *dbValue) String() string {
	switch {
	case v == nil:
		return ""
	case v.mistake != "":
		return "(not shown: it names no store)"
	case postgres.IsURL(v.raw):
		return postgres.RedactURL(v.raw)
	}
	return v.raw
}

// storeConfig is the store the flags name.
func (f dbFlags) storeConfig() app.StoreConfig {
	cfg := app.StoreConfig{DB: f.db.raw, BusyTimeout: *f.busyTimeout}
	if f.maxBytes != nil {
		cfg.MaxDBBytes = *f.maxBytes
	}
	if f.maxConns != nil {
		cfg.DBMaxConns = int32(*f.maxConns)
	}
	return cfg
}

// check refuses flag values no store accepts.
func (f dbFlags) check() error {
	if f.db.mistake != "" {
		return usageError(f.db.mistake)
	}
	if f.maxConns != nil && (*f.maxConns < 0 || *f.maxConns > 1<<16) {
		return usageError("--db-max-conns must be between 0 and 65536")
	}
	return nil
}

// open opens the store for a command-line tool: PostgreSQL for a
// postgres:// URL, else a SQLite file, which must exist: a command that
// reads or changes what is in a store never makes an empty one, which
// would hide a mistyped --db or the wrong directory.
func (f dbFlags) open(ctx context.Context) (plantstore.Store, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	cfg := f.storeConfig()
	cfg.MustExist = true
	store, err := app.OpenStore(ctx, cfg, false, app.StoreHooks{})
	if errors.Is(err, sqlite.ErrNoStore) {
		return nil, fmt.Errorf("%w; plantstore serve or plantstore token create makes one, and --db (PLANTSTORE_DB) names another", err)
	}
	return store, dbMistake(err)
}

// dbMistake makes a --db that is no URL a usage error (exit 2), as a
// malformed value of any other flag is.
func dbMistake(err error) error {
	if errors.Is(err, postgres.ErrInvalidURL) {
		return usageError("--db: " + err.Error())
	}
	return err
}

// create opens the store as open does, making a SQLite store if there is
// none, and says on stderr which file it made.
func (f dbFlags) create(ctx context.Context, stderr io.Writer) (plantstore.Store, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	store, err := app.OpenStore(ctx, f.storeConfig(), false, app.StoreHooks{Created: func(path string) {
		fmt.Fprintf(stderr, "created a new store: %s\n", path)
	}})
	return store, dbMistake(err)
}
