package main

import (
	"context"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/app"
	"github.com/plantstore/plantstore/internal/postgres"
)

// dbFlags are the flags every command shares to reach the store.
type dbFlags struct {
	db          *dbValue
	busyTimeout *time.Duration
	maxBytes    *int64
	maxConns    *int64
}

func addDBFlags(fs *flagSet) dbFlags {
	db := &dbValue{raw: "./plantstore.db"}
	fs.fromEnv("db", db)
	fs.Var(db, "db", "the store: the `PATH` of a SQLite file, created if missing, or a postgres:// URL (env "+envName("db")+")")
	return dbFlags{
		db:          db,
		busyTimeout: fs.Duration("busy-timeout", 5*time.Second, "how long a write waits for a lock another process holds on the store (SQLite's busy timeout, PostgreSQL's lock_timeout)"),
		maxBytes:    fs.Int64("max-db-bytes", 0, "SQLite only: cap on the database file's size; writes beyond it get 507 (0: no cap)"),
		maxConns:    fs.Int64("db-max-conns", 0, "PostgreSQL only: connections in this process's pool (0: the URL's pool_max_conns, else 16)"),
	}
}

// dbValue is the --db flag. It may be a URL holding a password, so it
// shows itself with the password masked: in the usage text (where a value
// from PLANTSTORE_DB would appear as the default) and in logs.
type dbValue struct{ raw string }

func (v *dbValue) Set(s string) error { v.raw = s; return nil }
func (v *dbValue) String() string {
	if v == nil {
		return ""
	}
	if postgres.IsURL(v.raw) {
		return postgres.RedactURL(v.raw)
	}
	return v.raw
}

// storeConfig is the store the flags name.
func (f dbFlags) storeConfig() app.StoreConfig {
	return app.StoreConfig{DB: f.db.raw, BusyTimeout: *f.busyTimeout, MaxDBBytes: *f.maxBytes, DBMaxConns: int32(*f.maxConns)}
}

// check refuses flag values no store accepts.
func (f dbFlags) check() error {
	if *f.maxConns < 0 || *f.maxConns > 1<<16 {
		return usageError("--db-max-conns must be between 0 and 65536")
	}
	return nil
}

// open opens the store for a command-line tool: PostgreSQL for a
// postgres:// URL, else a SQLite file.
func (f dbFlags) open(ctx context.Context) (plantstore.Store, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return app.OpenStore(ctx, f.storeConfig(), false, app.StoreHooks{})
}
