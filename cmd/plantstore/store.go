package main

import (
	"context"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/sqlite"
)

// dbFlags are the flags every command shares to reach the store.
type dbFlags struct {
	db          *string
	busyTimeout *time.Duration
	maxBytes    *int64
}

func addDBFlags(fs *flagSet) dbFlags {
	return dbFlags{
		db:          fs.String("db", "./plantstore.db", "the store: `PATH` of the SQLite file, created if missing"),
		busyTimeout: fs.Duration("busy-timeout", 5*time.Second, "how long a write waits for another process's lock on the store"),
		maxBytes:    fs.Int64("max-db-bytes", 0, "cap on the database file's size; writes beyond it get 507 (0: no cap)"),
	}
}

func (f dbFlags) path() string { return *f.db }

// open opens the store; soleServer is for serve, which must be the only
// server of the file (see sqlite.Options.SoleServer).
func (f dbFlags) open(ctx context.Context, soleServer bool) (plantstore.Store, error) {
	return sqlite.Open(ctx, *f.db, sqlite.Options{BusyTimeout: *f.busyTimeout, MaxBytes: *f.maxBytes, SoleServer: soleServer})
}
