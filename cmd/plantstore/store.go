package main

import (
	"context"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/sqlite"
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

// open opens the store for a command-line tool: PostgreSQL for a
// postgres:// URL, else a SQLite file.
func (f dbFlags) open(ctx context.Context) (plantstore.Store, error) {
	return f.openStore(ctx, false, storeHooks{})
}

// openServer opens the store for serve. serve must be the only server of
// a SQLite file (see sqlite.Options.SoleServer); any number of servers
// share a PostgreSQL database.
func (f dbFlags) openServer(ctx context.Context, hooks storeHooks) (plantstore.Store, error) {
	return f.openStore(ctx, true, hooks)
}

// storeHooks are what serve wants to hear from the store: enqueued after a
// create wrote webhook deliveries, observeBatch with each group commit's
// size. Either may be nil.
type storeHooks struct {
	enqueued     func()
	observeBatch func(int)
}

func (f dbFlags) openStore(ctx context.Context, soleServer bool, hooks storeHooks) (plantstore.Store, error) {
	if postgres.IsURL(f.db.raw) {
		if *f.maxConns < 0 || *f.maxConns > 1<<16 {
			return nil, usageError("--db-max-conns must be between 0 and 65536")
		}
		return postgres.Open(ctx, f.db.raw, postgres.Options{MaxConns: int32(*f.maxConns), LockTimeout: *f.busyTimeout, Enqueued: hooks.enqueued,
			ObserveBatch: hooks.observeBatch})
	}
	return sqlite.Open(ctx, f.db.raw, sqlite.Options{BusyTimeout: *f.busyTimeout, MaxBytes: *f.maxBytes, SoleServer: soleServer,
		Enqueued: hooks.enqueued, ObserveBatch: hooks.observeBatch})
}
