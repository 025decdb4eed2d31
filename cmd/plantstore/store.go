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
}

func addDBFlags(fs *flagSet) dbFlags {
	return dbFlags{
		db:          fs.String("db", "./plantstore.db", "the store: path of the SQLite file, created if missing"),
		busyTimeout: fs.Duration("busy-timeout", 5*time.Second, "how long a write waits for another process's lock on the store"),
	}
}

func (f dbFlags) path() string { return *f.db }

func (f dbFlags) open(ctx context.Context) (plantstore.Store, error) {
	return sqlite.Open(ctx, *f.db, sqlite.Options{BusyTimeout: *f.busyTimeout})
}
