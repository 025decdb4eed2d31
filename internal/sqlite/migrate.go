package sqlite

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/plantstore/plantstore/internal/migration"
)

// Migrations are embedded in the binary, named NNNN_what.sql, applied in
// order, each in its own transaction together with its row in
// schema_migrations.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

func loadMigrations() ([]migration.Migration, error) {
	return migration.Load(migrationFiles, "migrations")
}

// migrate applies the migrations this binary knows and the file lacks. Each
// runs in a BEGIN IMMEDIATE transaction that first re-reads the version, so
// processes starting together on one file apply each migration once. It
// refuses a file whose schema is newer than this binary, one with
// versions missing (migration.CheckRecorded), and, when underServer says a
// plantstore serve holds the file (this is a command-line tool), one whose
// schema is older and stays so for the busy timeout: that server is an
// older version, not this one upgrading it, and upgrading the
// file under it would leave it writing without what the new schema adds
// (the change feed, say) and unable to start again. underServer is asked
// only when a migration is due.
func (db *DB) migrate(ctx context.Context, underServer func() bool) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	// In a transaction that takes the write lock up front: in autocommit the
	// statement would start as a reader and its upgrade to a writer fails at
	// once, without waiting, when another process has written meanwhile.
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return storeError("begin", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL)`); err != nil {
		return storeError("create schema_migrations", err)
	}
	if err := tx.Commit(); err != nil {
		return storeError("create schema_migrations", err)
	}
	versions, err := db.recordedVersions(ctx)
	if err != nil {
		return err
	}
	if err := migration.CheckRecorded(versions, len(ms)); err != nil {
		return err
	}
	if n := len(versions); n > 0 && versions[n-1] < len(ms) && underServer() {
		// The server may be this version's, upgrading the store now (a
		// deploy script that starts serve, then makes a token): wait
		// for it, up to the busy timeout.
		if versions, err = db.awaitUpgrade(ctx, len(ms), underServer); err != nil {
			return err
		}
		if n := len(versions); n > 0 && versions[n-1] < len(ms) && underServer() {
			return fmt.Errorf("the store is at schema version %d and a plantstore serve is using it, of an older version (or one still upgrading it after --busy-timeout, %v): this plantstore (schema %d) would upgrade it under that server, which could then neither use it fully nor start again. Stop the server, then start this version's serve, which upgrades the store (docs/upgrades.md)",
				versions[n-1], db.busyTimeout, len(ms))
		}
	}
	for _, m := range ms {
		if err := db.apply(ctx, m); err != nil {
			return err
		}
	}
	// Only a copy from before the feed, which has just been migrated,
	// can carry a horizon: no query at every start.
	if n := len(versions); n == 0 || versions[n-1] < len(ms) {
		if err := db.applyCarriedHorizon(ctx); err != nil {
			return err
		}
	}
	// A schema newer than every migration we know means a newer binary wrote
	// it; running on would risk corrupting its data.
	var current int
	if err := db.write.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return storeError("read schema version", err)
	}
	if current > len(ms) {
		return migration.NewerSchemaError(current, len(ms))
	}
	return nil
}

// awaitUpgrade re-reads the recorded versions until they reach known, the
// server stops holding the store, or the busy timeout passes.
func (db *DB) awaitUpgrade(ctx context.Context, known int, underServer func() bool) ([]int, error) {
	deadline := time.Now().Add(db.busyTimeout)
	for {
		select {
		case <-ctx.Done():
			return nil, storeError("wait for the server's upgrade", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		versions, err := db.recordedVersions(ctx)
		if err != nil || len(versions) == 0 || versions[len(versions)-1] >= known || time.Now().After(deadline) || !underServer() {
			return versions, err
		}
	}
}

// recordedVersions are the versions schema_migrations records, ascending.
func (db *DB) recordedVersions(ctx context.Context) ([]int, error) {
	rows, err := db.write.QueryContext(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		return nil, storeError("read schema versions", err)
	}
	defer rows.Close()
	var versions []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, storeError("read schema versions", err)
		}
		versions = append(versions, v)
	}
	if err := rows.Err(); err != nil {
		return nil, storeError("read schema versions", err)
	}
	return versions, nil
}

func (db *DB) apply(ctx context.Context, m migration.Migration) error {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return storeError("begin migration", err)
	}
	defer tx.Rollback()
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return storeError("read schema version", err)
	}
	if current >= m.Version {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.Version, m.Name, millis(db.now())); err != nil {
		return fmt.Errorf("record migration %s: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return storeError("commit migration "+m.Name, err)
	}
	return nil
}

// applyCarriedHorizon ends what a restore began in a copy from before the
// change feed (carryEventIDs): now that the copy has a feed, its events
// start after the ids the store it replaced gave, so that no client gets
// an id it saw before for another change, and one that follows from such
// an id gets 410.
func (db *DB) applyCarriedHorizon(ctx context.Context) error {
	var carried int
	if err := db.write.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'carried_event_horizon'`).Scan(&carried); err != nil {
		return storeError("read the carried event horizon", err)
	}
	if carried == 0 {
		return nil
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return storeError("begin", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE event_horizon SET pruned_through = max(pruned_through, coalesce((SELECT max(through) FROM carried_event_horizon), 0))`); err != nil {
		return storeError("carry the event horizon", err)
	}
	if _, err := tx.ExecContext(ctx, `DROP TABLE carried_event_horizon`); err != nil {
		return storeError("carry the event horizon", err)
	}
	return storeError("carry the event horizon", tx.Commit())
}
