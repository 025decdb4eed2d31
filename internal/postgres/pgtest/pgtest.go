// Package pgtest gives tests a fresh, empty PostgreSQL database of their
// own, on the server named by the environment variable
// PLANTSTORE_TEST_POSTGRES, and skips them when it is not set.
//
// To run such tests:
//
//	eval "$(bash .ci/postgres.sh)"   # starts a throwaway server, exports the variable
//	go test ./...
//	bash .ci/postgres.sh stop "$PLANTSTORE_TEST_POSTGRES_DIR"
package pgtest

import (
	"context"
	"crypto/rand"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvVar names the environment variable that holds the URL of a server
// where the tests may create and drop databases (a superuser's, or one
// with CREATEDB), for example
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
const EnvVar = "PLANTSTORE_TEST_POSTGRES"

// AdminURL returns the URL in PLANTSTORE_TEST_POSTGRES, and skips t when
// it is not set, in a few words: the package's TestMain says how to run
// them, once (Unset).
func AdminURL(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(EnvVar)
	if admin == "" {
		t.Skip("no PostgreSQL server (" + EnvVar + " is not set)")
	}
	return admin
}

// Unset says, when PLANTSTORE_TEST_POSTGRES is not set, why a package's
// PostgreSQL tests are skipped and how to run them: a TestMain prints it
// once, so that a green run without a server is not taken for a full one.
// It is empty when the variable is set.
func Unset(pkg string) string {
	if os.Getenv(EnvVar) != "" {
		return ""
	}
	return pkg + ": " + EnvVar + " is not set, so the tests that need a PostgreSQL server are skipped; " +
		"`eval \"$(bash .ci/postgres.sh)\"` starts one and exports it"
}

// NewDatabase creates a database with a random name on the server of
// PLANTSTORE_TEST_POSTGRES and returns its URL: the admin URL with the
// database name replaced. The database is dropped when t ends, along with
// any connection still open to it; whatever the test opens on it, it
// should close in a Cleanup registered after this call, so that it runs
// first. NewDatabase skips t when the variable is not set.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin := AdminURL(t)
	// rand.Text is upper-case base32; a lower-case name needs no quotes in
	// psql when someone looks at a leftover database.
	name := "plantstore_test_" + strings.ToLower(rand.Text()[:16])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := CreateDatabase(ctx, admin, name)
	if err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := DropDatabase(ctx, admin, name); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return db
}

// CreateDatabase creates an empty UTF8 database called name on the server
// of the admin URL and returns the database's URL: the admin URL with the
// database name replaced. The load harness uses it too.
func CreateDatabase(ctx context.Context, admin, name string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// Not quoted: the URL may hold a password.
		return "", errors.New("the admin URL is not a postgres:// URL")
	}
	// template0 takes no connections, so databases can be created from
	// it concurrently; UTF8 is what plantstore needs.
	if err := adminExec(ctx, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0 ENCODING 'UTF8'"); err != nil {
		return "", err
	}
	u.Path = "/" + name
	q := u.Query()
	if q.Has("dbname") || q.Has("database") {
		q.Del("database")
		q.Set("dbname", name)
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// DropDatabase drops the database called name, and any connection still
// open to it.
func DropDatabase(ctx context.Context, admin, name string) error {
	return adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// adminExec runs one statement on a connection of its own: CREATE and
// DROP DATABASE cannot run in a transaction, and a short-lived connection
// holds nothing open that the drop would have to wait for.
func adminExec(ctx context.Context, admin, sql string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}
