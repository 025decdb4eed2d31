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
// it is not set.
func AdminURL(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(EnvVar)
	if admin == "" {
		t.Skipf("no PostgreSQL server: to run this test, start one with "+
			"`eval \"$(bash .ci/postgres.sh)\"`, which exports %s, or set %s to an admin URL", EnvVar, EnvVar)
	}
	return admin
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
	u, err := url.Parse(admin)
	if err != nil {
		// Not quoted: the URL may hold a password.
		t.Fatalf("%s does not parse as a URL", EnvVar)
	}
	// rand.Text is upper-case base32; a lower-case name needs no quotes in
	// psql when someone looks at a leftover database.
	name := "plantstore_test_" + strings.ToLower(rand.Text()[:16])

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// template0 takes no connections, so databases can be created from
	// it concurrently; UTF8 is what plantstore needs.
	if err := adminExec(ctx, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0 ENCODING 'UTF8'"); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})

	u.Path = "/" + name
	q := u.Query()
	if q.Has("dbname") || q.Has("database") {
		q.Del("database")
		q.Set("dbname", name)
		u.RawQuery = q.Encode()
	}
	return u.String()
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
