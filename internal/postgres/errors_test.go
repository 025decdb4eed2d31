package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
)

func TestClassify(t *testing.T) {
	pg := func(state string) error {
		return fmt.Errorf("query: %w", &pgconn.PgError{Severity: "ERROR", Code: state})
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"deadline", context.DeadlineExceeded, plantstore.EUNAVAILABLE},
		{"cancelled", fmt.Errorf("acquire: %w", context.Canceled), plantstore.EUNAVAILABLE},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, plantstore.EUNAVAILABLE},
		{"lost mid-statement", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), plantstore.EUNAVAILABLE},
		{"conn closed", pgconn.ErrConnClosed, plantstore.EUNAVAILABLE},
		{"connect failed", &pgconn.ConnectError{}, plantstore.EUNAVAILABLE},
		{"connection exception", pg("08006"), plantstore.EUNAVAILABLE},
		{"admin shutdown", pg("57P01"), plantstore.EUNAVAILABLE},
		{"crash shutdown", pg("57P02"), plantstore.EUNAVAILABLE},
		{"cannot connect now", pg("57P03"), plantstore.EUNAVAILABLE},
		{"too many connections", pg("53300"), plantstore.EUNAVAILABLE},
		{"out of memory", pg("53200"), plantstore.EUNAVAILABLE},
		{"read-only", pg("25006"), plantstore.EUNAVAILABLE},
		{"statement cancelled", pg("57014"), plantstore.EUNAVAILABLE},
		{"lock timeout", pg("55P03"), plantstore.EUNAVAILABLE},
		{"serialization failure", pg("40001"), plantstore.EUNAVAILABLE},
		{"deadlock", pg("40P01"), plantstore.EUNAVAILABLE},
		{"disk full", pg("53100"), plantstore.EINSUFFICIENT},
		{"idle session timeout", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P05"}, plantstore.EUNAVAILABLE},
		{"database dropped", &pgconn.PgError{Severity: "FATAL", Code: "57P04"}, plantstore.EUNAVAILABLE},
		{"fatal, localized", &pgconn.PgError{Severity: "SCHWERWIEGEND", SeverityUnlocalized: "FATAL", Code: "XX000"}, plantstore.EUNAVAILABLE},
		{"syntax error", pg("42601"), plantstore.EINTERNAL},
		{"unique violation", pg("23505"), plantstore.EINTERNAL},
		{"something else", errors.New("boom"), plantstore.EINTERNAL},
	} {
		if got, _ := classify(tc.err); got != tc.want {
			t.Errorf("%s: classify = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestStoreErrorRedactsAndKeepsDomainErrors(t *testing.T) {
	db := &DB{secrets: []string{"hunter2 secret"}}
	err := db.storeError("get plant 1", errors.New("failed to connect to postgres://u:hunter2%20secret@h/db with hunter2 secret"))
	if plantstore.ErrorCode(err) != plantstore.EINTERNAL || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("storeError = %v", err)
	}
	if plantstore.ErrorMessage(err) != "internal error" {
		t.Errorf("the client would read %q", plantstore.ErrorMessage(err))
	}
	notFound := plantstore.Errorf(plantstore.ENOTFOUND, "plant 1 not found")
	if got := db.storeError("get plant 1", notFound); got != notFound {
		t.Errorf("a domain error came back as %v", got)
	}
	if db.storeError("x", nil) != nil {
		t.Error("storeError(nil) is not nil")
	}
}

func TestRetry(t *testing.T) {
	deadlock := &pgconn.PgError{Code: "40P01"}
	for _, tc := range []struct {
		name      string
		failures  int // how many runs fail before one succeeds
		err       error
		wantCalls int
		wantErr   bool
	}{
		{"succeeds at once", 0, deadlock, 1, false},
		{"deadlock, then success", 2, deadlock, 3, false},
		{"deadlock every time", 10, deadlock, maxAttempts, true},
		{"not retryable", 10, &pgconn.PgError{Code: "23505"}, 1, true},
	} {
		calls := 0
		err := retry(context.Background(), func(context.Context) error {
			calls++
			if calls <= tc.failures {
				return tc.err
			}
			return nil
		})
		if calls != tc.wantCalls || (err != nil) != tc.wantErr {
			t.Errorf("%s: %d calls, error %v; want %d calls, error %v", tc.name, calls, err, tc.wantCalls, tc.wantErr)
		}
	}
}

func TestPoolConfig(t *testing.T) {
	cfg, secrets, err := poolConfig("postgres://u:pw%2Fx@localhost/db", Options{MaxConns: 7})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.ConnectTimeout != defaultConnectTimeout {
		t.Errorf("ConnectTimeout = %v, want the default %v", cfg.ConnConfig.ConnectTimeout, defaultConnectTimeout)
	}
	if cfg.MaxConns != 7 {
		t.Errorf("MaxConns = %d, want 7", cfg.MaxConns)
	}
	if cfg.MaxConnLifetime != defaultConnLifetime || cfg.MaxConnLifetimeJitter != defaultConnLifetimeJitter {
		t.Errorf("sessions live %v + %v, want %v + %v", cfg.MaxConnLifetime, cfg.MaxConnLifetimeJitter, defaultConnLifetime, defaultConnLifetimeJitter)
	}
	if got := cfg.ConnConfig.RuntimeParams["synchronous_commit"]; got != "on" {
		t.Errorf("synchronous_commit = %q, want on", got)
	}
	if got := cfg.ConnConfig.RuntimeParams["application_name"]; got != "plantstore" {
		t.Errorf("application_name = %q", got)
	}
	if !strings.Contains(strings.Join(secrets, " "), "pw/x") {
		t.Errorf("secrets %q lack the password", secrets)
	}

	cfg, _, err = poolConfig("postgresql://localhost/db?connect_timeout=2&pool_max_conns=3&application_name=mine&synchronous_commit=remote_apply&pool_max_conn_lifetime=1h", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.ConnectTimeout != 2*time.Second || cfg.MaxConns != 3 || cfg.MaxConnLifetime != time.Hour || cfg.MaxConnLifetimeJitter != 0 {
		t.Errorf("the URL's settings were overridden: ConnectTimeout %v, MaxConns %d, MaxConnLifetime %v + %v", cfg.ConnConfig.ConnectTimeout, cfg.MaxConns, cfg.MaxConnLifetime, cfg.MaxConnLifetimeJitter)
	}
	if p := cfg.ConnConfig.RuntimeParams; p["application_name"] != "mine" || p["synchronous_commit"] != "remote_apply" {
		t.Errorf("runtime parameters %v", p)
	}

	cfg, _, err = poolConfig("postgres://localhost/db", Options{LockTimeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxConns != DefaultMaxConns {
		t.Errorf("MaxConns = %d with no size given, want DefaultMaxConns (%d)", cfg.MaxConns, DefaultMaxConns)
	}
	if got := cfg.ConnConfig.RuntimeParams["lock_timeout"]; got != "1500" {
		t.Errorf("lock_timeout = %q, want 1500", got)
	}
}

// Every session commits durably, even where the database's default says
// otherwise.
func TestSessionsCommitDurably(t *testing.T) {
	ctx := context.Background()
	db := openWithDatabaseSetting(t, `synchronous_commit = off`)
	var setting string
	if err := db.pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting != "on" {
		t.Errorf("synchronous_commit = %s in a store's session, want on", setting)
	}
}

// openWithDatabaseSetting opens a store on a fresh database whose
// default for every new session is setting ("name = value"), closed when
// the test ends.
func openWithDatabaseSetting(t *testing.T, setting string) *DB {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	setup, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	name := setup.pool.Config().ConnConfig.Database
	if _, err := setup.pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` SET `+setting); err != nil {
		t.Fatal(err)
	}
	setup.Close()
	db, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A session the server ends for a reason classify does not list (here
// idle_session_timeout, a FATAL 57P05 at the next statement on a pooled
// connection left idle past it) is EUNAVAILABLE, as a lost connection
// is: a 503 with Retry-After, not a 500.
func TestSessionEndedByServerIsUnavailable(t *testing.T) {
	ctx := context.Background()
	db := openWithDatabaseSetting(t, `idle_session_timeout = '200ms'`)
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "idle"}); err != nil {
		t.Fatal(err)
	}
	ended := 0
	for range 5 {
		// Under the pool's 1 s before it pings an idle connection.
		time.Sleep(500 * time.Millisecond)
		_, err := db.GetPlant(ctx, 1)
		if err == nil {
			continue
		}
		if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
			t.Fatalf("a read on a session the server ended: %v (%s), want EUNAVAILABLE", err, plantstore.ErrorCode(err))
		}
		ended++
	}
	if ended == 0 {
		t.Fatal("no read met a session the server ended: the test proves nothing")
	}
}

// A statement that outlives its caller's deadline is EUNAVAILABLE, and
// returns when the deadline passes, not when the statement ends.
func TestSlowStatementDeadline(t *testing.T) {
	db, err := Open(context.Background(), pgtest.NewDatabase(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = db.pool.Exec(ctx, `SELECT pg_sleep(5)`)
	err = db.storeError("sleep", err)
	if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Errorf("pg_sleep past the deadline: %v, want %s", err, plantstore.EUNAVAILABLE)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("a 200 ms deadline returned after %v", elapsed)
	}
	if err := db.Ping(context.Background()); err != nil {
		t.Errorf("Ping after a timed-out statement: %v", err)
	}
}

// capStatementTimeout lowers statement_timeout to what is left of a
// deadline, never raises it, and ends with its transaction.
func TestCapStatementTimeout(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, c := range []struct{ session, capTo, want string }{
		{"0", "1500ms", "1500ms"},
		{"5s", "1500ms", "1500ms"},
		{"100ms", "1500ms", "100ms"},
		{"1min", "250ms", "250ms"},
	} {
		if _, err := conn.Exec(ctx, "SET statement_timeout = '"+c.session+"'"); err != nil {
			t.Fatal(err)
		}
		var inTx, after string
		b := &pgx.Batch{}
		b.Queue(capStatementTimeout, c.capTo)
		b.Queue(`SHOW statement_timeout`).QueryRow(func(r pgx.Row) error { return r.Scan(&inTx) })
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, `SHOW statement_timeout`).Scan(&after); err != nil {
			t.Fatal(err)
		}
		want, _ := time.ParseDuration(c.want)
		got, _ := time.ParseDuration(strings.Replace(inTx, "min", "m", 1))
		session, _ := time.ParseDuration(strings.Replace(c.session, "min", "m", 1))
		gotAfter, _ := time.ParseDuration(strings.Replace(after, "min", "m", 1))
		if got != want || gotAfter != session {
			t.Errorf("statement_timeout %s capped to %s: %q in the batch, %q after; want %s, then %s", c.session, c.capTo, inTx, after, c.want, c.session)
		}
	}
}
