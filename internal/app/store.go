package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/sqlite"
)

// StoreConfig names the store and how to reach it. The engine follows
// from DB's form: a postgres:// URL or a SQLite file's path.
type StoreConfig struct {
	DB          string
	BusyTimeout time.Duration // SQLite's busy timeout, PostgreSQL's lock_timeout
	MaxDBBytes  int64         // SQLite only: 0 for no cap
	DBMaxConns  int32         // PostgreSQL only: 0 for the URL's or the default
	// MustExist refuses to make a new SQLite store (sqlite.ErrNoStore):
	// the commands that only read or change what is there set it. A
	// PostgreSQL database always exists already; its tables are made by
	// whichever command opens it first.
	MustExist bool
}

// StoreHooks are what a server wants to hear from its store; either may
// be nil.
type StoreHooks struct {
	// Enqueued is called after a write stored webhook deliveries.
	Enqueued func()
	// ObserveBatch is told the size of each group commit.
	ObserveBatch func(writes int)
	// Created is told the absolute path of a SQLite store just made.
	Created func(path string)
	// EventsWritten is called when events were recorded: by this process
	// or, on PostgreSQL, by any (sqlite.Options.EventsWritten,
	// postgres.Options.EventsWritten).
	EventsWritten func()
	// Logger receives what the store has to say in the background.
	Logger *slog.Logger
}

// OpenStore opens the store for a command-line tool (soleServer false) or
// for serve, which must be the only server of a SQLite file (see
// sqlite.Options.SoleServer); any number of servers share a PostgreSQL
// database.
func OpenStore(ctx context.Context, cfg StoreConfig, soleServer bool, hooks StoreHooks) (plantstore.Store, error) {
	if postgres.IsURL(cfg.DB) {
		return postgres.Open(ctx, cfg.DB, postgres.Options{
			MaxConns:      cfg.DBMaxConns,
			LockTimeout:   cfg.BusyTimeout,
			Enqueued:      hooks.Enqueued,
			ObserveBatch:  hooks.ObserveBatch,
			EventsWritten: hooks.EventsWritten,
			Logger:        hooks.Logger,
		})
	}
	return sqlite.Open(ctx, cfg.DB, sqlite.Options{
		BusyTimeout:   cfg.BusyTimeout,
		MaxBytes:      cfg.MaxDBBytes,
		SoleServer:    soleServer,
		MustExist:     cfg.MustExist,
		Created:       hooks.Created,
		Enqueued:      hooks.Enqueued,
		ObserveBatch:  hooks.ObserveBatch,
		EventsWritten: hooks.EventsWritten,
		Logger:        hooks.Logger,
	})
}

// StoreWarnings are what is unsafe about how the store is reached: a
// SQLite file other local users can read, a PostgreSQL connection whose
// password or traffic could be seen or its server faked.
func StoreWarnings(db string) []string {
	if postgres.IsURL(db) {
		return postgres.Warnings(db)
	}
	return sqlite.Warnings(db)
}
