package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/sqlite"
)

// runBackup copies a SQLite store while it serves. --to is read from the
// command line only, not from a variable: it names a new file each time.
func runBackup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("backup", `backup --to FILE [--db PATH]

Writes a consistent copy of the SQLite store at --db to FILE, while the
server goes on serving: every plant acknowledged before the backup began
is in it. FILE must not exist. Its SHA-256 is written to FILE.sha256,
which restore checks. The copy holds token hashes and webhook secrets:
keep it as safe as the store. Restore it with plantstore restore.
For PostgreSQL, use pg_dump (see docs/operations.md, Backups).`, getenv, stdout, stderr)
	db := addDBFlags(fs)
	to := fs.FlagSet.String("to", "", "the backup `FILE` to write; it must not exist (required)")
	if rest, err := fs.parse(args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError(fmt.Sprintf("backup takes no arguments, got %q; use --to", rest))
	}
	if err := db.check(); err != nil {
		return err
	}
	if postgres.IsURL(db.db.raw) {
		return usageError("backup copies a SQLite store; for PostgreSQL, use pg_dump --format=custom (see docs/operations.md, Backups)")
	}
	if *to == "" {
		return usageError("backup needs --to FILE")
	}
	info, err := sqlite.Backup(ctx, db.db.raw, *to, *db.busyTimeout)
	if errors.Is(err, sqlite.ErrNoStore) {
		return fmt.Errorf("%w; --db (PLANTSTORE_DB) names the store to back up", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "backed up %s to %s: %s, schema version %d, %d plants; its SHA-256 is in %s, which restore checks (as does sha256sum -c, run in that directory): keep the two together\n",
		db.db.raw, info.Path, byteSize(info.Bytes), info.SchemaVersion, info.Plants, info.Checksum)
	return nil
}

// runRestore replaces a SQLite store with a backup. --force is read from
// the command line only: a variable left set must never make a restore
// destroy a store.
func runRestore(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("restore", `restore --from FILE [--db PATH] [--force] [--feed-after ID]

Makes the backup FILE (written by plantstore backup) the SQLite store at
--db. Stop the server first: restore refuses while one serves the store.
The backup is checked before anything changes: against FILE.sha256 when
it is there, then its structure and schema. A store already at --db
is replaced only with --force, and is then gone: back it up first if you
may need it. The change feed goes on after the newest event of the store
replaced, so that its followers resync; when that store cannot be read,
or is gone, --feed-after gives the newest event id a client may have
seen. For PostgreSQL, use pg_restore (see docs/operations.md, Backups
section).`, getenv, stdout, stderr)
	db := addDBFlags(fs)
	from := fs.FlagSet.String("from", "", "the backup `FILE` to restore (required)")
	force := fs.FlagSet.Bool("force", false, "replace the store at --db if there is one")
	feedAfter := fs.FlagSet.String("feed-after", "", "the newest event `ID` a client may have seen from the store this one replaces (any higher id will do; 0: no client follows the feed): the change feed goes on after it")
	if rest, err := fs.parse(args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError(fmt.Sprintf("restore takes no arguments, got %q; use --from", rest))
	}
	if err := db.check(); err != nil {
		return err
	}
	if postgres.IsURL(db.db.raw) {
		return usageError("restore writes a SQLite store; for PostgreSQL, use pg_restore (or psql for a plain dump) into an empty database (see docs/operations.md, Backups)")
	}
	if *from == "" {
		return usageError("restore needs --from FILE")
	}
	opts := sqlite.RestoreOptions{Replace: *force}
	if *feedAfter != "" {
		id, err := strconv.ParseInt(*feedAfter, 10, 64)
		if err != nil || id < 0 {
			return usageError(fmt.Sprintf("--feed-after %q: want an event id, 0 or more", *feedAfter))
		}
		opts.FeedAfter = &id
	}
	info, err := sqlite.Restore(ctx, *from, db.db.raw, opts)
	if errors.Is(err, sqlite.ErrStoreExists) {
		return fmt.Errorf("%w; back it up first if you may need it (plantstore backup), then replace it with --force", err)
	}
	if err != nil {
		return err
	}
	checked := "it matched its checksum in " + info.Checksum
	if info.Checksum == "" {
		checked = "no " + *from + sqlite.ChecksumSuffix + " beside it, so its contents were not checked against a checksum, only its structure"
	}
	fmt.Fprintf(stderr, "restored %s to %s (%s): schema version %d, %d plants, %d active tokens, %d webhook subscribers; start the server with: plantstore serve --db %s\n",
		*from, info.Path, checked, info.SchemaVersion, info.Plants, info.Tokens, info.Subscribers, info.Path)
	if info.Tokens > 0 || info.Subscribers > 0 {
		fmt.Fprintln(stderr, "tokens revoked and webhook subscribers removed since the backup are active again, and those added since are gone: check plantstore token list and plantstore webhook list, and revoke or remove again what must stay so")
	}
	if info.FeedMovedPast > 0 {
		fmt.Fprintf(stderr, "the change feed goes on after event %d, past event %d, the newest a client may have seen: clients that followed the store replaced get 410 and read the plants again, as the changes they saw after the backup are undone, then follow after %d\n",
			info.FeedAfter, info.FeedMovedPast, info.FeedAfter)
	} else {
		fmt.Fprintf(stderr, "the change feed goes on after event %d, the backup's newest; if clients followed a store that went further (one lost, say), restore with --feed-after and the newest id they may have seen, so that they resync\n",
			info.FeedAfter)
	}
	return nil
}

// byteSize shows n in the largest binary unit it fills.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	size, prefix := float64(n)/unit, "KMGTPE"
	for size >= unit && len(prefix) > 1 {
		size, prefix = size/unit, prefix[1:]
	}
	return fmt.Sprintf("%.1f %ciB", size, prefix[0])
}
