package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/plantstore/plantstore/internal/migration"
)

// Migrations are embedded in the binary, named NNNN_what.sql with versions
// 1, 2, 3... and applied in order, each in its own transaction together
// with its row in schema_migrations. A new table (webhook subscribers, an
// outbox) is a new file; nothing else changes.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

func loadMigrations() ([]migration.Migration, error) {
	return migration.Load(migrationFiles, "migrations")
}

// migrationLock is the key of the advisory lock that serialises migrations
// among all processes on one database: "plantsto" in ASCII, a number no
// other user of pg_advisory_xact_lock is likely to pick.
const migrationLock int64 = 0x706c616e7473746f

// migrate checks the database's encoding, applies the migrations this
// binary knows and the database lacks, and refuses a database whose schema
// is newer than this binary.
func (db *DB) migrate(ctx context.Context) error {
	if err := db.checkEncoding(ctx); err != nil {
		return err
	}
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	for {
		found, err := db.applyNext(ctx, ms)
		if incomplete, ok := errors.AsType[*migration.IncompleteSchemaError](err); ok {
			return incomplete
		}
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42501" { // insufficient_privilege
			return fmt.Errorf("postgres: migrate: %s: the role in the URL must own the database (docs/postgres.md)", pgErr.Message)
		}
		if err != nil {
			return db.storeError("migrate", err)
		}
		// A newer binary wrote this schema; running on it could corrupt
		// data it added.
		if found > len(ms) {
			return migration.NewerSchemaError(found, len(ms))
		}
		if found == len(ms) {
			db.schemaVersion = found
			return db.checkPrivileges(ctx)
		}
	}
}

// applyNext reads the schema version and, if a migration follows it,
// applies that one, all in one transaction that holds the migration lock:
// processes starting together on an empty database wait for each other
// here, and each migration is applied once. It returns the version it
// found before applying anything.
func (db *DB) applyNext(ctx context.Context, ms []migration.Migration) (found int, err error) {
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		// Released at commit or rollback, and with the session if the
		// connection dies: no lock outlives a crashed process.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return err
		}
		// Looked up rather than CREATE TABLE IF NOT EXISTS, which needs the
		// right to create tables even when the table exists.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, `CREATE TABLE schema_migrations (
				version    integer     PRIMARY KEY,
				name       text        NOT NULL,
				applied_at timestamptz NOT NULL)`); err != nil {
				return fmt.Errorf("create schema_migrations: %w", err)
			}
		}
		rows, err := tx.Query(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
		if err != nil {
			return err
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		if err := migration.CheckRecorded(versions, len(ms)); err != nil {
			return err
		}
		if len(versions) > 0 {
			found = versions[len(versions)-1]
		}
		if found >= len(ms) {
			return nil
		}
		m := ms[found] // versions are 1, 2, 3...: the next is at index found
		// Without arguments pgx sends the file in one simple-protocol
		// message, so it may hold several statements.
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
			m.Version, m.Name, db.now()); err != nil {
			return fmt.Errorf("record migration %s: %w", m.Name, err)
		}
		return nil
	})
	return found, err
}

// checkEncoding refuses a database that cannot hold every name and tag:
// its encoding must be UTF8. The server reports it when a connection
// starts, so this costs no round trip.
func (db *DB) checkEncoding(ctx context.Context) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return db.storeError("connect", err)
	}
	defer conn.Release()
	if enc := conn.Conn().PgConn().ParameterStatus("server_encoding"); enc != "UTF8" {
		return fmt.Errorf("the database's encoding is %s; plantstore needs UTF8 (CREATE DATABASE ... ENCODING 'UTF8')", enc)
	}
	return nil
}

// servingPrivileges are, for each table of a store, the privileges its
// statements take while serving (migrations aside, which take the
// owner): SELECT on every one (a SELECT … FOR UPDATE takes UPDATE too,
// and an INSERT … ON CONFLICT DO UPDATE, UPDATE as well), and the writes
// the code makes of it. Every table the migrations make is here
// (TestStoreTablesAreTheMigrations).
var servingPrivileges = []struct {
	table      string
	privileges []string
}{
	{"schema_migrations", []string{"SELECT"}},
	{"plants", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{"tokens", []string{"SELECT", "INSERT", "UPDATE"}},
	{"events", []string{"SELECT", "INSERT", "DELETE"}},
	{"event_counter", []string{"SELECT", "UPDATE"}},
	{"event_horizon", []string{"SELECT", "UPDATE"}},
	{"webhook_subscribers", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{"webhook_deliveries", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{"webhook_subscriber_errors", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{"webhook_subscriber_events", []string{"SELECT", "INSERT"}},
}

// checkPrivileges refuses a role that lacks a privilege serving takes
// (servingPrivileges) on a store made already, by its owner: migrate
// refuses a role that may not create only when it makes or upgrades the
// schema, and a role granted SELECT alone would start ready, then answer
// every write 500 (permission denied). It asks no more, so a role granted
// just that is not refused; has_any_column_privilege is true for a grant
// on the table or on any of its columns (a grant of UPDATE on the
// columns written). Each privilege is asked alone: with a list, true
// means any one of them.
func (db *DB) checkPrivileges(ctx context.Context) error {
	var tables, privileges []string
	for _, tp := range servingPrivileges {
		for _, p := range tp.privileges {
			tables, privileges = append(tables, tp.table), append(privileges, p)
		}
	}
	rows, err := db.pool.Query(ctx, `SELECT t || ' (' || p || ')' FROM unnest($1::text[], $2::text[]) AS x(t, p)
		WHERE NOT CASE WHEN p = 'DELETE' THEN has_table_privilege(t, p) ELSE has_any_column_privilege(t, p) END`, tables, privileges)
	if err != nil {
		return db.storeError("check the role's privileges", err)
	}
	lacking, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return db.storeError("check the role's privileges", err)
	}
	if len(lacking) > 0 {
		return fmt.Errorf("postgres: the role in the URL lacks privileges serving takes: %s; it must own the database, or be granted SELECT on every table of the store and INSERT, UPDATE and DELETE on every one but schema_migrations (docs/postgres.md)", strings.Join(lacking, ", "))
	}
	return nil
}
