package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
	"github.com/plantstore/plantstore/internal/storetest"
)

// openTest opens a store on a fresh database and returns it with the
// database's URL.
func openTest(t *testing.T) (*postgres.DB, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	db, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, url
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) plantstore.Store {
		db, _ := openTest(t)
		return db
	})
}

// connect opens a plain connection beside the store, to look at or hold
// what the store cannot show.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Concurrent creates of one id with the same content: one creates, the
// others are replays, none fails. Under READ COMMITTED this is the race in
// which the loser's insert waits for the winner's commit.
func TestConcurrentReplaysOfOneCreate(t *testing.T) {
	db, _ := openTest(t)
	const n = 16
	for round := range 5 {
		id := int64(round)
		var wg sync.WaitGroup
		created := make([]bool, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				created[i], errs[i] = db.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: "same"})
			})
		}
		wg.Wait()
		winners := 0
		for i := range n {
			if errs[i] != nil {
				t.Errorf("round %d, creator %d: %v", round, i, errs[i])
			}
			if created[i] {
				winners++
			}
		}
		if winners != 1 {
			t.Errorf("round %d: %d creates reported created, want 1", round, winners)
		}
	}
}

// waitForLockWaiters waits until n of the store's statements wait for a
// lock in the observer's database.
func waitForLockWaiters(t *testing.T, observer *pgx.Conn, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var waiting int
		if err := observer.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'plantstore' AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the store's statements wait for a lock, want %d", waiting, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A create of an id that another transaction has inserted but not yet
// committed waits for it, then answers as that transaction's outcome
// demands: a replay or a conflict if it committed, a create if it rolled
// back.
func TestCreateWaitsForAnUncommittedCreate(t *testing.T) {
	for _, tc := range []struct {
		name        string
		other       string // the name the other transaction inserts
		commit      bool
		wantCreated bool
		wantCode    string
	}{
		{"same content, committed", "Fern", true, false, ""},
		{"other content, committed", "Moss", true, false, plantstore.ECONFLICT},
		{"rolled back", "Moss", false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, url := openTest(t)
			ctx := context.Background()
			tx, err := connect(t, url).Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO plants (id, name, created_at) VALUES (1, $1, now())`, tc.other); err != nil {
				t.Fatal(err)
			}
			type result struct {
				created bool
				err     error
			}
			done := make(chan result, 1)
			go func() {
				created, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "Fern"})
				done <- result{created, err}
			}()
			waitForLockWaiters(t, connect(t, url), 1)
			if tc.commit {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			got := <-done
			if got.created != tc.wantCreated || plantstore.ErrorCode(got.err) != tc.wantCode {
				t.Errorf("CreatePlant = %v, %v; want %v and code %q", got.created, got.err, tc.wantCreated, tc.wantCode)
			}
		})
	}
}

// knownMigrations counts the migration files this binary embeds.
func knownMigrations(t *testing.T) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations found: %v", err)
	}
	return len(files)
}

// Several instances starting at once on an empty database: all start, and
// each migration is applied once.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	url := pgtest.NewDatabase(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			db, err := postgres.Open(context.Background(), url, postgres.Options{})
			errs[i] = err
			if err == nil {
				db.Close()
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
	rows, err := connect(t, url).Query(context.Background(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for v := 1; v <= knownMigrations(t); v++ {
		want = append(want, v)
	}
	if fmt.Sprint(versions) != fmt.Sprint(want) {
		t.Errorf("schema_migrations holds versions %v, want %v", versions, want)
	}
	// And again, on a database already up to date.
	db, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatalf("Open on a migrated database: %v", err)
	}
	db.Close()
}

func TestRefusesNewerSchema(t *testing.T) {
	db, url := openTest(t)
	db.Close()
	newer := knownMigrations(t) + 1
	if _, err := connect(t, url).Exec(context.Background(),
		`INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, 'from the future', now())`, newer); err != nil {
		t.Fatal(err)
	}
	_, err := postgres.Open(context.Background(), url, postgres.Options{})
	want := fmt.Sprintf("database schema version %d is newer than this plantstore knows (%d); upgrade plantstore", newer, newer-1)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open on a newer schema: %v, want an error saying %q", err, want)
	}
}

// A rollback by hand that stopped part-way leaves versions missing below
// the highest: Open says so rather than start on tables that are gone.
func TestRefusesAnIncompleteSchema(t *testing.T) {
	db, url := openTest(t)
	db.Close()
	if _, err := connect(t, url).Exec(context.Background(), `DELETE FROM schema_migrations WHERE version IN (3, 4)`); err != nil {
		t.Fatal(err)
	}
	_, err := postgres.Open(context.Background(), url, postgres.Options{})
	want := "database schema is incomplete: schema_migrations records versions 1, 2"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("not all of 1 to %d", knownMigrations(t))) {
		t.Fatalf("Open on an incomplete schema: %v, want an error saying %q", err, want)
	}
}

func TestRefusesNonUTF8Database(t *testing.T) {
	admin := pgtest.AdminURL(t)
	url := pgtest.NewDatabase(t)
	// NewDatabase makes UTF8 databases; make this one again in LATIN1.
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	conn := connect(t, admin)
	for _, sql := range []string{
		`DROP DATABASE ` + pgx.Identifier{name}.Sanitize(),
		`CREATE DATABASE ` + pgx.Identifier{name}.Sanitize() + ` TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'`,
	} {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	_, err = postgres.Open(context.Background(), url, postgres.Options{})
	if err == nil || !strings.Contains(err.Error(), "plantstore needs UTF8") {
		t.Fatalf("Open on a LATIN1 database: %v, want a refusal", err)
	}
}

// Both URL schemes of PostgreSQL are accepted; anything else is refused
// without quoting it.
func TestURLSchemes(t *testing.T) {
	_, url := openTest(t)
	alt := "postgresql://" + strings.TrimPrefix(url, "postgres://")
	db, err := postgres.Open(context.Background(), alt, postgres.Options{})
	if err != nil {
		t.Fatalf("postgresql:// URL: %v", err)
	}
	db.Close()
	// A scheme is case-insensitive (RFC 3986); pgx's own check is not.
	upper := "Postgres://" + strings.TrimPrefix(url, "postgres://")
	if db, err = postgres.Open(context.Background(), upper, postgres.Options{}); err != nil {
		t.Fatalf("Postgres:// URL: %v", err)
	}
	db.Close()
}

// A role that may not create tables in the database (PostgreSQL 15 no
// longer lets every role create in schema public) is told what it lacks
// when the first open makes the schema, not an internal error.
func TestRoleThatMayNotCreateIsTold(t *testing.T) {
	_, roleURL := newRole(t, pgtest.NewDatabase(t), "plantstore_no_create")
	db, err := postgres.Open(context.Background(), roleURL, postgres.Options{})
	if err == nil {
		db.Close()
		t.Fatal("a role that may not create tables opened an empty database")
	}
	if msg := err.Error(); !strings.Contains(msg, "permission denied for schema public") || !strings.Contains(msg, "the role in the URL must own the database") || strings.Contains(msg, "internal error") {
		t.Errorf("Open as a role that may not create: %v", err)
	}
}

// The tables whose privileges an open checks are every one the
// migrations make, so that a table added later is checked too.
func TestStoreTablesAreTheMigrations(t *testing.T) {
	_, url := openTest(t)
	var made []string
	rows, err := connect(t, url).Query(context.Background(), `SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1`)
	if err == nil {
		made, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	checked := slices.Sorted(slices.Values(postgres.StoreTables))
	if !slices.Equal(made, checked) {
		t.Errorf("the migrations make %v; the privilege check asks about %v", made, checked)
	}
}

// A role that may read a store its owner made, but not write it, is
// refused at the open, naming what it lacks; before, it started ready and
// answered every write 500. Granted what serving takes, it opens and
// writes, without privileges it does not use.
func TestRoleThatMayNotWriteIsRefused(t *testing.T) {
	ctx := context.Background()
	_, url := openTest(t) // the owner makes the store
	role, roleURL := newRole(t, url, "plantstore_reader")
	inDB := sqlRunner(t, url)
	inDB("GRANT USAGE ON SCHEMA public TO " + role)
	inDB("GRANT SELECT ON ALL TABLES IN SCHEMA public TO " + role)
	db, err := postgres.Open(ctx, roleURL, postgres.Options{})
	if err == nil {
		db.Close()
		t.Fatal("a role that may only read the store opened it")
	}
	if msg := err.Error(); !strings.Contains(msg, "lacks privileges serving takes") || !strings.Contains(msg, "plants (INSERT), plants (UPDATE), plants (DELETE)") {
		t.Errorf("Open as a role that may only read: %v", err)
	}
	// Writing plants alone is not enough: a create writes its event.
	inDB("GRANT INSERT, UPDATE, DELETE ON plants TO " + role)
	if db, err = postgres.Open(ctx, roleURL, postgres.Options{}); err == nil {
		db.Close()
		t.Fatal("a role that may write plants but not their events opened the store")
	} else if !strings.Contains(err.Error(), "events (INSERT)") || !strings.Contains(err.Error(), "event_counter (UPDATE)") {
		t.Errorf("Open as a role that may write plants only: %v", err)
	}
	// Granted what serving takes, and no more: nothing on
	// schema_migrations but SELECT, UPDATE on some columns only.
	inDB("GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO " + role)
	inDB("REVOKE INSERT, UPDATE, DELETE ON schema_migrations FROM " + role)
	inDB("REVOKE UPDATE ON plants FROM " + role)
	inDB("GRANT UPDATE (name, tag) ON plants TO " + role)
	db, err = postgres.Open(ctx, roleURL, postgres.Options{})
	if err != nil {
		t.Fatalf("Open as a role granted every table: %v", err)
	}
	defer db.Close()
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "granted"}); err != nil {
		t.Errorf("a create as a role granted what serving takes: %v", err)
	}
	if err := db.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "renamed"}, nil); err != nil {
		t.Errorf("an update as a role granted what serving takes: %v", err)
	}
	if err := db.DeletePlant(ctx, 1, nil); err != nil {
		t.Errorf("a delete as a role granted what serving takes: %v", err)
	}
}

// A file the URL names that cannot be read (a CA certificate's path
// mistyped) is said with the URL's password masked, and is not taken for
// a URL of the wrong form (the command exits 1, as for a file it cannot
// read, not 2).
func TestURLNamingAnUnreadableFile(t *testing.T) {
	_, err := postgres.Open(context.Background(), "postgres://u:hunter2secret@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/no/such/ca.pem", postgres.Options{})
	if err == nil || errors.Is(err, postgres.ErrInvalidURL) || strings.Contains(err.Error(), "hunter2secret") ||
		!strings.Contains(err.Error(), "a file the database URL names cannot be read") || !strings.Contains(err.Error(), "/no/such/ca.pem") {
		t.Errorf("Open with a missing sslrootcert: %v", err)
	}
}

func TestRefusesOtherURLs(t *testing.T) {
	for _, url := range []string{
		"mysql://u:hunter2secret@localhost/db",
		"host=localhost password=hunter2secret",
		"plants.db",
		"postgres://u:hunter2secret@localhost:notaport/db",
		"postgres://u:hunter2secret@localhost/db?synchronous_commit=off",
		"postgres://u:hunter2secret@localhost/db?synchronous_commit=False",
		"postgres://u:hunter2secret@localhost/db?pool_max_conns=many",
	} {
		_, err := postgres.Open(context.Background(), url, postgres.Options{})
		if err == nil {
			t.Errorf("Open(%q) succeeded", url)
			continue
		}
		if strings.Contains(err.Error(), "hunter2secret") {
			t.Errorf("Open(%q): the error shows the password: %v", url, err)
		}
	}
}

// closedPort returns a loopback port where nothing listens.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// A server that is down fails fast and as EUNAVAILABLE, and the password
// stays out of the message. Needs no PostgreSQL.
func TestUnreachableServer(t *testing.T) {
	url := fmt.Sprintf("postgres://plantstore:hunter2secret@127.0.0.1:%d/plants?sslmode=disable", closedPort(t))
	start := time.Now()
	_, err := postgres.Open(context.Background(), url, postgres.Options{})
	if code := plantstore.ErrorCode(err); code != plantstore.EUNAVAILABLE {
		t.Errorf("Open on a closed port: %v, want %s", err, plantstore.EUNAVAILABLE)
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("Open on a closed port took %v", elapsed)
	}
	if err != nil && strings.Contains(err.Error(), "hunter2secret") {
		t.Errorf("the error shows the password: %v", err)
	}
}

// silentServer accepts connections and never answers, as a server that
// hangs or a firewall that swallows packets would look.
func silentServer(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().(*net.TCPAddr).Port
}

// A server that does not answer holds a caller no longer than its context,
// or the URL's connect_timeout. Needs no PostgreSQL.
func TestSilentServer(t *testing.T) {
	port := silentServer(t)
	url := fmt.Sprintf("postgres://plantstore:hunter2secret@127.0.0.1:%d/plants?sslmode=disable", port)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := postgres.Open(ctx, url, postgres.Options{})
	if code := plantstore.ErrorCode(err); code != plantstore.EUNAVAILABLE {
		t.Errorf("Open with a deadline on a silent server: %v, want %s", err, plantstore.EUNAVAILABLE)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Open with a 300 ms deadline took %v", elapsed)
	}

	start = time.Now()
	_, err = postgres.Open(context.Background(), url+"&connect_timeout=1", postgres.Options{})
	if code := plantstore.ErrorCode(err); code != plantstore.EUNAVAILABLE {
		t.Errorf("Open with connect_timeout=1 on a silent server: %v, want %s", err, plantstore.EUNAVAILABLE)
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("Open with connect_timeout=1 took %v", elapsed)
	}
	if err != nil && strings.Contains(err.Error(), "hunter2secret") {
		t.Errorf("the error shows the password: %v", err)
	}
}

// A statement stuck behind another session's lock answers EUNAVAILABLE
// when its caller's deadline passes, and the store serves on afterwards.
func TestDeadlineOnBlockedStatement(t *testing.T) {
	db, url := openTest(t)
	ctx := context.Background()
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "Fern"}); err != nil {
		t.Fatal(err)
	}
	holder := connect(t, url)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE plants IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(context.Context) error{
		"GetPlant": func(ctx context.Context) error { _, err := db.GetPlant(ctx, 1); return err },
		"ListPlants": func(ctx context.Context) error {
			_, err := db.ListPlants(ctx, plantstore.ListOptions{Limit: 10})
			return err
		},
		"CreatePlant": func(ctx context.Context) error {
			_, err := db.CreatePlant(ctx, plantstore.Plant{ID: 2, Name: "Aloe"})
			return err
		},
		"UpdatePlant": func(ctx context.Context) error {
			return db.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "Moss"}, nil)
		},
		"DeletePlant": func(ctx context.Context) error { return db.DeletePlant(ctx, 1, nil) },
	} {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		start := time.Now()
		err := call(ctx)
		elapsed := time.Since(start)
		cancel()
		if code := plantstore.ErrorCode(err); code != plantstore.EUNAVAILABLE {
			t.Errorf("%s behind a lock: %v, want %s", name, err, plantstore.EUNAVAILABLE)
		}
		if elapsed > 2*time.Second {
			t.Errorf("%s with a 200 ms deadline took %v", name, elapsed)
		}
	}
	// The server was asked to cancel them (pgx does when it drops a
	// connection mid-statement): none is left waiting for the lock, to run,
	// or commit, once it is released.
	waitForLockWaiters(t, connect(t, url), 0)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(ctx); err != nil {
		t.Errorf("Ping after the lock was released: %v", err)
	}
	if got, err := db.GetPlant(ctx, 1); err != nil || got.Name != "Fern" {
		t.Errorf("plant 1 after the lock was released: %v, %v; want it unchanged", got, err)
	}
	if _, err := db.GetPlant(ctx, 2); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("plant 2, whose create timed out, exists: %v", err)
	}
}

func TestClosed(t *testing.T) {
	db, _ := openTest(t)
	db.Close()
	if err := db.Ping(context.Background()); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Errorf("Ping after Close: %v, want %s", err, plantstore.EUNAVAILABLE)
	}
	if _, err := db.GetPlant(context.Background(), 1); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Errorf("GetPlant after Close: %v, want %s", err, plantstore.EUNAVAILABLE)
	}
	if err := db.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// The instances share the database: what one writes, another reads at
// once, as there is no cache to go stale.
func TestInstancesShareTheDatabase(t *testing.T) {
	a, url := openTest(t)
	b, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if _, err := a.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "Fern"}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.GetPlant(ctx, 1); err != nil || got.Name != "Fern" {
		t.Fatalf("b reads %v, %v", got, err)
	}
	if err := b.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "Moss"}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := a.GetPlant(ctx, 1); err != nil || got.Name != "Moss" {
		t.Fatalf("a reads %v, %v after b's update", got, err)
	}
}

func TestMain(m *testing.M) {
	// Tests that need no server run in any case; say once why the others
	// are skipped, so a green run without a server is not mistaken for
	// a full one.
	if why := pgtest.Unset("internal/postgres"); why != "" {
		fmt.Fprintln(os.Stderr, why)
	}
	os.Exit(m.Run())
}

// The statements docs/operations.md gives to run after pg_restore carry
// the change feed past the replaced database's newest event L: a client
// that followed it gets EGONE, new events never reuse an id it saw, and
// pruning what was restored keeps the horizon past L.
func TestRestoredFeedCarriedOnByHand(t *testing.T) {
	ctx := context.Background()
	db, url := openTest(t)
	for i := range int64(5) {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: i, Name: "restored"}); err != nil {
			t.Fatal(err)
		}
	}
	const gone = 45 // the replaced database's newest event
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(doc), "run on the restored one\n\n```sql\n")
	stmts, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("docs/operations.md gives no statements to run after pg_restore")
	}
	if _, err := connect(t, url).Exec(ctx, strings.ReplaceAll(stmts, "L + 1", fmt.Sprint(gone+1))); err != nil {
		t.Fatalf("the documented statements: %v", err)
	}
	for _, after := range []int64{5, gone} {
		if _, err := db.Events(ctx, plantstore.EventQuery{After: after, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EGONE {
			t.Errorf("events after %d: %v, want EGONE", after, err)
		}
	}
	if latest, err := db.LatestEventID(ctx); err != nil || latest != gone+1 {
		t.Errorf("latest event id %d, %v; want %d", latest, err, gone+1)
	}
	restoredAt := time.Now()
	time.Sleep(5 * time.Millisecond)
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 100, Name: "after the restore"}); err != nil {
		t.Fatal(err)
	}
	page, err := db.Events(ctx, plantstore.EventQuery{After: gone + 1, Limit: 10})
	if err != nil || len(page) != 1 || page[0].ID != gone+2 {
		t.Errorf("following after the restore: %+v, %v; want one event, %d", page, err, gone+2)
	}
	if n, err := db.PruneEvents(ctx, restoredAt); err != nil || n != 5 {
		t.Fatalf("pruning the restored events: %d, %v; want 5", n, err)
	}
	if _, err := db.Events(ctx, plantstore.EventQuery{After: gone, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EGONE {
		t.Errorf("after the pruning, events after %d: %v, want EGONE", gone, err)
	}
}

// testProxy relays TCP to a database server, counting the connections it
// accepts, until freeze is called; from then on it relays nothing and
// keeps every connection open, as a database server that hangs (SIGSTOP,
// a dead host behind a live load balancer) would.
type testProxy struct {
	addr     string
	accepted atomic.Int64
	frozen   chan struct{}
	once     sync.Once
}

func (p *testProxy) freeze() { p.once.Do(func() { close(p.frozen) }) }

func newTestProxy(t *testing.T, addr string) *testProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &testProxy{addr: l.Addr().String(), frozen: make(chan struct{})}
	var mu sync.Mutex
	var conns []net.Conn
	relay := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			select {
			case <-p.frozen:
				return // swallowed, as a hung server would
			default:
			}
			if n > 0 {
				dst.Write(buf[:n])
			}
			if err != nil {
				dst.Close()
				return
			}
		}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			go relay(s, c)
			go relay(c, s)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return p
}

// With the server hung, Close does not wait out pgx's 15 s goodbye on
// each connection: a shutdown stays near --shutdown-timeout.
func TestCloseWithServerHung(t *testing.T) {
	url := pgtest.NewDatabase(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTestProxy(t, u.Host)
	u.Host = proxy.addr
	db, err := postgres.Open(context.Background(), u.String(), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.freeze()
	// A statement the hang outlasts, as the last flush of token use at
	// shutdown: pgx then cancels it on a connection of its own, which
	// waits for an answer too.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := db.Ping(ctx); err == nil {
		t.Fatal("Ping of a hung server succeeded")
	}
	start := time.Now()
	db.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close with the server hung took %v", took.Round(time.Millisecond))
	}
}

// While the server accepts connections and then refuses their sessions
// (here a database closed to connections; a server starting up or
// shutting down does the same), the pool does not try one a request:
// the attempts are spaced out, and the store is back soon after the
// database is.
func TestSessionsRefusedAtStartUpAreSpacedOut(t *testing.T) {
	url := pgtest.NewDatabase(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	proxy := newTestProxy(t, u.Host)
	u.Host = proxy.addr
	db, err := postgres.Open(context.Background(), u.String(), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	exec := sqlRunner(t, pgtest.AdminURL(t))
	db.Ping(context.Background())

	ident := pgx.Identifier{name}.Sanitize()
	exec("ALTER DATABASE " + ident + " ALLOW_CONNECTIONS false")
	exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '" + name + "'")
	before := proxy.accepted.Load()
	var wg sync.WaitGroup
	var pings, failures, unexplained atomic.Int64
	var example atomic.Value
	deadline := time.Now().Add(1500 * time.Millisecond)
	for range 16 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := db.Ping(ctx)
				cancel()
				pings.Add(1)
				if err != nil {
					failures.Add(1)
					if code := plantstore.ErrorCode(err); code != plantstore.EUNAVAILABLE {
						t.Errorf("a ping while the database refuses sessions: %v (%s), want EUNAVAILABLE", err, code)
						return
					}
					// The server's reason, in the pause too: an
					// operator reads it in the log. (The idle
					// connections were terminated: 57P01.)
					if msg := err.Error(); !strings.Contains(msg, "not currently accepting connections") && !strings.Contains(msg, "57P01") && !errors.Is(err, context.DeadlineExceeded) {
						unexplained.Add(1)
						example.Store(err.Error())
					}
				}
			}
		})
	}
	wg.Wait()
	attempts := proxy.accepted.Load() - before
	t.Logf("%d pings, %d failed, %d connections in 1.5 s", pings.Load(), failures.Load(), attempts)
	if failures.Load() < pings.Load()-16 {
		t.Fatalf("%d of %d pings failed; the database was meant to refuse sessions", failures.Load(), pings.Load())
	}
	// The pauses (50, 100, 200, 400, 800 ms) allow about six attempts in
	// 1.5 s, after the first wave of the 16 callers.
	if attempts > 16+10 {
		t.Errorf("%d connections in 1.5 s while sessions were refused; want them spaced out", attempts)
	}
	if n := unexplained.Load(); n > 0 {
		t.Errorf("%d of %d failures do not give the server's reason, such as %q", n, failures.Load(), example.Load())
	}

	exec("ALTER DATABASE " + ident + " ALLOW_CONNECTIONS true")
	back := time.Now()
	for db.Ping(context.Background()) != nil {
		if time.Since(back) > 3*time.Second {
			t.Fatal("the store was not back 3 s after the database took connections again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("back %v after the database", time.Since(back).Round(time.Millisecond))
}

// With sslmode=prefer against a server without TLS, pgconn first tries
// TLS, is refused, and starts the session without: the refused TLS is no
// failure of the server, and every new connection starts.
func TestPreferredTLSRefusedIsNoFailure(t *testing.T) {
	url := pgtest.NewDatabase(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("sslmode", "prefer")
	// A new connection for each ping: the one before has outlived its
	// lifetime when the next is asked for. (Far shorter, and pgxpool
	// gives up on connections that expire before it hands them out.)
	q.Set("pool_max_conn_lifetime", "100ms")
	u.RawQuery = q.Encode()
	db, err := postgres.Open(context.Background(), u.String(), postgres.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for i := range 6 {
		if err := db.Ping(context.Background()); err != nil {
			t.Fatalf("ping %d with sslmode=prefer: %v", i, err)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// A database put in the place of this one answers a connection's ping,
// but not the requests: Ping reads the schema, so /readyz takes the
// instance out rather than have it answer 500 to everything.
func TestPingNoticesAReplacedDatabase(t *testing.T) {
	url := pgtest.NewDatabase(t)
	db, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	exec := sqlRunner(t, url)
	// Restored from an older version.
	exec("DELETE FROM schema_migrations WHERE version > 1")
	err = db.Ping(context.Background())
	if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE || !strings.Contains(err.Error(), "schema is at version 1") {
		t.Errorf("Ping of a database at an older schema: %v, want EUNAVAILABLE naming the version", err)
	}
	// No schema at all.
	exec("ALTER TABLE schema_migrations RENAME TO schema_migrations_moved")
	err = db.Ping(context.Background())
	if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE || !strings.Contains(err.Error(), "no plantstore schema") {
		t.Errorf("Ping of a database without the schema: %v, want EUNAVAILABLE saying so", err)
	}
}

// A session keeps the settings it started with. A database made
// read-only (ALTER DATABASE ... SET default_transaction_read_only, as
// after a failover, or by a DBA) and then reset must take writes again
// without a restart: the pool closes read-only sessions as they are given
// back, once they are a little old (an hour, pgx's session lifetime,
// before).
func TestWritesComeBackAfterTheDatabaseIsNoLongerReadOnly(t *testing.T) {
	postgres.SetReadOnlyRenewal(t, 300*time.Millisecond)
	url := pgtest.NewDatabase(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	var logs apitest.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	db, err := postgres.Open(context.Background(), url, postgres.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	exec := sqlRunner(t, pgtest.AdminURL(t))
	ident := pgx.Identifier{name}.Sanitize()
	next := int64(0)
	create := func() error {
		next++
		_, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: next, Name: "Fern"})
		return err
	}
	if err := create(); err != nil {
		t.Fatal(err)
	}
	exec("ALTER DATABASE " + ident + " SET default_transaction_read_only = on")
	t.Cleanup(func() {
		admin, err := pgx.Connect(context.Background(), pgtest.AdminURL(t))
		if err == nil {
			admin.Exec(context.Background(), "ALTER DATABASE "+ident+" RESET default_transaction_read_only")
			admin.Close(context.Background())
		}
	})
	exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '" + name + "'")
	// Sessions started now are read-only: writes fail, and are refused as
	// a fault that may pass.
	readOnly := false
	for deadline := time.Now().Add(3 * time.Second); !readOnly && time.Now().Before(deadline); {
		err := create()
		if err == nil {
			t.Fatal("a create succeeded on a read-only database")
		}
		if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
			t.Fatalf("a create on a read-only database: %v, want EUNAVAILABLE", err)
		}
		readOnly = strings.Contains(err.Error(), "25006")
		time.Sleep(20 * time.Millisecond)
	}
	if !readOnly {
		t.Fatal("creates never failed for the read-only database")
	}
	// An instance that starts now says so; the first, started while the
	// database took writes, said nothing of the kind.
	var second apitest.Buffer
	db2, err := postgres.Open(context.Background(), url, postgres.Options{Logger: slog.New(slog.NewJSONHandler(&second, nil))})
	if err != nil {
		t.Fatalf("open on a read-only database: %v", err)
	}
	db2.Close()
	const warning = `"level":"WARN","msg":"the database takes no writes (a standby, or default_transaction_read_only)`
	if !strings.Contains(second.String(), warning) || !strings.Contains(second.String(), `"default_transaction_read_only":"on"`) {
		t.Errorf("an instance started on a read-only database logged\n%s\nwant %s", second.String(), warning)
	}
	if strings.Contains(logs.String(), "takes no writes") {
		t.Errorf("an instance started on a database that took writes warned that it did not:\n%s", logs.String())
	}
	// Many sessions, all read-only, in the pool.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { db.Ping(context.Background()) })
	}
	wg.Wait()

	exec("ALTER DATABASE " + ident + " RESET default_transaction_read_only")
	reset := time.Now()
	for create() != nil {
		if time.Since(reset) > 3*time.Second {
			t.Fatal("creates still failed 3 s after the database took writes again")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("writes back %v after the reset", time.Since(reset).Round(time.Millisecond))
	// And stay back: no read-only session is left to fail one.
	for range 20 {
		if err := create(); err != nil {
			t.Fatalf("a create after the first one that succeeded: %v", err)
		}
	}
	// At debug level the log shows the renewal.
	for _, want := range []string{
		`"msg":"database session started","server_pid":`,
		`"read_only":true`,
		`"msg":"database session closed","server_pid":`,
		`"why":"read-only"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the debug log lacks %s:\n%s", want, logs.String())
		}
	}
}

// sqlRunner connects to url and returns what runs a statement there,
// failing the test on an error; the connection closes when the test ends.
// newRole makes a role of its own for the test, with no grants, dropped
// at its end, and returns its name and url with the role as its user.
func newRole(t *testing.T, url, prefix string) (role, roleURL string) {
	t.Helper()
	role = fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	sqlRunner(t, pgtest.AdminURL(t))("CREATE ROLE " + role + " LOGIN")
	t.Cleanup(func() {
		// After the database's own clean-up, which drops what the role owns.
		conn, err := pgx.Connect(context.Background(), pgtest.AdminURL(t))
		if err == nil {
			conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
			conn.Close(context.Background())
		}
	})
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User(role)
	return role, u.String()
}

func sqlRunner(t *testing.T, url string) func(sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return func(sql string) {
		t.Helper()
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
}
