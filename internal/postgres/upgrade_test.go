package postgres_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/migration"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
	"github.com/plantstore/plantstore/internal/storetest"
)

// upgradeFixture is a database written by an earlier plantstore, and what
// it holds: testdata/upgrade/vN.sql (pg_dump's plain SQL) and vN.json,
// made by internal/sqlite/testdata/upgrade/make.sh.
type upgradeFixture struct {
	Commit        string `json:"commit"`
	SchemaVersion int    `json:"schema_version"`
	Tokens        []struct {
		Name    string   `json:"name"`
		Secret  string   `json:"secret"`
		Scopes  []string `json:"scopes"`
		Revoked bool     `json:"revoked"`
	} `json:"tokens"`
	// Subscribers are the webhook subscribers the earlier binary added
	// (none before its webhook tables), with their deliveries pending.
	Subscribers []struct {
		ID      int64  `json:"id"`
		URL     string `json:"url"`
		Secret  string `json:"secret"`
		Pending int64  `json:"pending"`
	} `json:"subscribers"`
	Plants []struct {
		ID   int64   `json:"id"`
		Name string  `json:"name"`
		Tag  *string `json:"tag"`
	} `json:"plants"`
}

// checkUpgradedSubscribers checks that the fixture's webhook subscribers
// came through the upgrade: the same URL, secret (read by secretOf, as
// the store never lists it) and deliveries pending, getting plant.created
// only, as every subscriber did before it could choose. It returns the
// other subscribers.
func checkUpgradedSubscribers(t *testing.T, subs []plantstore.Subscriber, f upgradeFixture, secretOf func(id int64) string) []plantstore.Subscriber {
	t.Helper()
	for _, want := range f.Subscribers {
		i := slices.IndexFunc(subs, func(s plantstore.Subscriber) bool { return s.ID == want.ID })
		if i < 0 {
			t.Errorf("subscriber %d of the fixture is gone: %+v", want.ID, subs)
			continue
		}
		got := subs[i]
		if got.URL != want.URL || got.Pending < want.Pending || !slices.Equal(got.Events, []string{plantstore.EventCreated}) || got.DisabledAt != nil {
			t.Errorf("subscriber %d: %+v; want %s, plant.created, %d pending or more", want.ID, got, want.URL, want.Pending)
		}
		if secret := secretOf(want.ID); secret != want.Secret {
			t.Errorf("subscriber %d's secret changed in the upgrade", want.ID)
		}
		subs = slices.Delete(slices.Clone(subs), i, i+1)
	}
	return subs
}

func (f upgradeFixture) plants() []plantstore.Plant {
	ps := make([]plantstore.Plant, len(f.Plants))
	for i, p := range f.Plants {
		ps[i] = plantstore.Plant{ID: p.ID, Name: p.Name, Tag: p.Tag}
	}
	slices.SortFunc(ps, func(a, b plantstore.Plant) int { return cmp.Compare(a.ID, b.ID) })
	return ps
}

func (f upgradeFixture) secret(name string) string {
	for _, tok := range f.Tokens {
		if tok.Name == name && !tok.Revoked {
			return tok.Secret
		}
	}
	panic("no active token " + name + " in the fixture")
}

// restoreFixture loads the fixture of schema version v into a fresh
// database and returns the fixture and the database's URL.
func restoreFixture(t *testing.T, v int) (upgradeFixture, string) {
	t.Helper()
	base := filepath.Join("testdata", "upgrade", fmt.Sprintf("v%d", v))
	b, err := os.ReadFile(base + ".json")
	if err != nil {
		t.Fatalf("no fixture for schema version %d: add one with internal/sqlite/testdata/upgrade/make.sh (%v)", v, err)
	}
	var f upgradeFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s.json: %v", base, err)
	}
	if f.SchemaVersion != v {
		t.Fatalf("%s.json says schema version %d, want %d", base, f.SchemaVersion, v)
	}
	dump, err := os.ReadFile(base + ".sql")
	if err != nil {
		t.Fatal(err)
	}
	// pg_dump's \restrict and \unrestrict lines are for psql; the rest is
	// SQL, sent in one simple-protocol message on a connection of its own
	// (the dump empties its search_path).
	var script strings.Builder
	for line := range strings.Lines(string(dump)) {
		if !strings.HasPrefix(line, `\`) {
			script.WriteString(line)
		}
	}
	url := pgtest.NewDatabase(t)
	conn := connect(t, url)
	if _, err := conn.Exec(context.Background(), script.String()); err != nil {
		t.Fatalf("restore %s.sql: %v", base, err)
	}
	conn.Close(context.Background())
	if got := appliedMigrations(t, url); len(got) != v {
		t.Fatalf("the fixture records migrations %v, want versions 1 to %d", got, v)
	}
	return f, url
}

// appliedMigrations reads schema_migrations as "version name applied_at",
// by version from 1.
func appliedMigrations(t *testing.T, url string) []string {
	t.Helper()
	rows, err := connect(t, url).Query(context.Background(), `SELECT version, name, applied_at FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	var ms []string
	var v int
	var name string
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&v, &name, &at}, func() error {
		if v != len(ms)+1 {
			return fmt.Errorf("schema_migrations skips to version %d after %v", v, ms)
		}
		ms = append(ms, fmt.Sprintf("%d %s %s", v, name, at.UTC().Format(time.RFC3339Nano)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ms
}

// neverNewest are the schema versions no commit on main ended at: each
// arrived in one commit with the version after it, so no binary ever ran
// at it, no database can be at it, and it has no fixture. (3, the change
// feed, came with 4, the webhook subscribers' last error.)
var neverNewest = map[int]bool{3: true, 4: true}

// earlierVersions are the schema versions before the current one that a
// binary ran at: each has its fixture.
func earlierVersions(t *testing.T) []int {
	var vs []int
	for v := 1; v < knownMigrations(t); v++ {
		if !neverNewest[v] {
			vs = append(vs, v)
		}
	}
	return vs
}

// TestUpgradeFromEarlierSchemas restores each database an earlier
// plantstore wrote and opens it with this one: it migrates to the current
// schema with its tokens and plants intact, and takes every kind of write.
func TestUpgradeFromEarlierSchemas(t *testing.T) {
	pgtest.AdminURL(t)
	current := knownMigrations(t)
	for _, v := range earlierVersions(t) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			ctx := context.Background()
			f, url := restoreFixture(t, v)
			before := appliedMigrations(t, url)
			db, err := postgres.Open(ctx, url, postgres.Options{})
			if err != nil {
				t.Fatalf("open the version %d database (from %.12s): %v", v, f.Commit, err)
			}
			defer func() { db.Close() }()
			after := appliedMigrations(t, url)
			if len(after) != current || !slices.Equal(after[:v], before) {
				t.Fatalf("migrations %v after opening, were %v; want versions 1 to %d, the earlier ones unchanged", after, before, current)
			}
			checkUpgradedTokens(t, db, f)
			checkUpgradedPlants(t, db, f.plants())
			secretOf := func(id int64) string { return subscriberSecret(t, url, id) }
			subs, err := db.Subscribers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rest := checkUpgradedSubscribers(t, subs, f, secretOf); len(rest) != 0 {
				t.Errorf("subscribers the fixture does not have: %+v", rest)
			}
			for _, want := range f.Subscribers {
				if i := slices.IndexFunc(subs, func(s plantstore.Subscriber) bool { return s.ID == want.ID }); i >= 0 && subs[i].Pending != want.Pending {
					t.Errorf("subscriber %d: %d pending, want the fixture's %d", want.ID, subs[i].Pending, want.Pending)
				}
			}

			// Every kind of write, on the migrated database.
			tag := "upgraded"
			sub, err := db.AddSubscriber(ctx, "https://hooks.example/plants", "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q=")
			if err != nil {
				t.Fatalf("AddSubscriber: %v", err)
			}
			added := plantstore.Plant{ID: 1000, Name: "New after upgrade", Tag: &tag}
			if created, err := db.CreatePlant(ctx, added); err != nil || !created {
				t.Fatalf("CreatePlant: %v, %v", created, err)
			}
			old := f.plants()[0]
			if created, err := db.CreatePlant(ctx, old); err != nil || created {
				t.Errorf("replaying the create of %v: created %v, %v; want an idempotent replay", old, created, err)
			}
			if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: old.ID, Name: old.Name + " (other)"}); plantstore.ErrorCode(err) != plantstore.ECONFLICT {
				t.Errorf("creating %d with other content: %v, want ECONFLICT", old.ID, err)
			}
			updated := plantstore.Plant{ID: old.ID, Name: "Renamed after upgrade", Tag: &tag}
			if err := db.UpdatePlant(ctx, updated, nil); err != nil {
				t.Fatalf("UpdatePlant: %v", err)
			}
			deleted := f.plants()[1].ID
			if err := db.DeletePlant(ctx, deleted, nil); err != nil {
				t.Fatalf("DeletePlant: %v", err)
			}
			if _, err := db.CreateToken(ctx, plantstore.Token{Name: "after-upgrade", Scopes: plantstore.KnownScopes}, plantstore.HashToken("pst_after")); err != nil {
				t.Errorf("CreateToken: %v", err)
			}
			if err := db.RevokeToken(ctx, "fixture-admin", time.Now()); err != nil {
				t.Errorf("RevokeToken: %v", err)
			}
			db.Close()

			// Opened again, as at the next start: nothing to migrate.
			db, err = postgres.Open(ctx, url, postgres.Options{})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			if again := appliedMigrations(t, url); !slices.Equal(again, after) {
				t.Errorf("migrations after a restart %v, want %v", again, after)
			}
			want := f.plants()
			want[0] = updated
			want = slices.DeleteFunc(want, func(p plantstore.Plant) bool { return p.ID == deleted })
			want = append(want, added)
			checkUpgradedPlants(t, db, want)
			if subs, err := db.Subscribers(ctx); err != nil {
				t.Error(err)
			} else if rest := checkUpgradedSubscribers(t, subs, f, secretOf); len(rest) != 1 || rest[0].ID != sub.ID || rest[0].Pending != 1 {
				t.Errorf("Subscribers = %+v; want the fixture's and %d with the one create after it pending", subs, sub.ID)
			}
			if _, err := db.TokenByHash(ctx, plantstore.HashToken(f.secret("fixture-admin"))); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
				t.Errorf("the revoked fixture-admin: %v, want ENOTFOUND", err)
			}
		})
	}
}

func checkUpgradedTokens(t *testing.T, db *postgres.DB, f upgradeFixture) {
	t.Helper()
	ctx := context.Background()
	revoked := 0
	for _, want := range f.Tokens {
		got, err := db.TokenByHash(ctx, plantstore.HashToken(want.Secret))
		if want.Revoked {
			revoked++
			if plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
				t.Errorf("revoked token %s: %+v, %v; want ENOTFOUND", want.Name, got, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("token %s: %v", want.Name, err)
			continue
		}
		if got.Name != want.Name || !slices.Equal(got.Scopes, want.Scopes) || got.CreatedAt.IsZero() || !got.RevokedAt.IsZero() {
			t.Errorf("token %s = %+v, want scopes %v, a creation time and no revocation", want.Name, got, want.Scopes)
		}
	}
	all, err := db.ListTokens(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(f.Tokens) {
		t.Errorf("ListTokens(all) = %+v, want %d tokens", all, len(f.Tokens))
	}
	for _, tok := range all {
		// The fixture's admin and reader went through the old server,
		// which recorded their use when it stopped.
		if (tok.Name == "fixture-admin" || tok.Name == "fixture-reader") && tok.LastUsedAt.IsZero() {
			t.Errorf("%s lost its last use: %+v", tok.Name, tok)
		}
	}
	active, err := db.ListTokens(ctx, false)
	if err != nil || len(active) != len(f.Tokens)-revoked {
		t.Errorf("ListTokens(active) = %+v, %v; want %d", active, err, len(f.Tokens)-revoked)
	}
}

// checkUpgradedPlants compares the store's plants with want: one by one,
// listed whole, by pages, and by each tag.
func checkUpgradedPlants(t *testing.T, db *postgres.DB, want []plantstore.Plant) {
	t.Helper()
	ctx := context.Background()
	slices.SortFunc(want, func(a, b plantstore.Plant) int { return cmp.Compare(a.ID, b.ID) })
	for _, p := range want {
		got, err := db.GetPlant(ctx, p.ID)
		if err != nil || !got.SameContent(p) {
			t.Errorf("GetPlant(%d) = %v, %v; want %v", p.ID, got, err, p)
		}
	}
	same := func(what string, got, want []plantstore.Plant) {
		t.Helper()
		if !slices.EqualFunc(got, want, plantstore.Plant.SameContent) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	var paged []plantstore.Plant
	var after *int64
	for {
		page, err := db.ListPlants(ctx, plantstore.ListOptions{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, page...)
		if len(page) < 2 {
			break
		}
		after = &page[len(page)-1].ID
	}
	same("ListPlants by pages of 2", paged, want)
	tags := map[string]bool{}
	for _, p := range want {
		if p.Tag != nil {
			tags[*p.Tag] = true
		}
	}
	for tag := range tags {
		got, err := db.ListPlants(ctx, plantstore.ListOptions{Tag: &tag, Limit: plantstore.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		same(fmt.Sprintf("ListPlants(tag %q)", tag), got, slices.DeleteFunc(slices.Clone(want), func(p plantstore.Plant) bool {
			return p.Tag == nil || *p.Tag != tag
		}))
	}
}

// TestUpgradeWhilePreviousVersionServes is a rolling upgrade: the real
// binary of the previous schema version serves the database, under
// writes, while this version opens it and migrates it, and goes on
// serving after.
//
// Why the real binary, built from git history (the commit that made the
// fixture), rather than the old version's SQL statements replayed in a
// loop: a copy of the statements tests what we believe the old version
// does; the binary is what operators run, with its own pool, statement
// cache, retries, lock timeout and start-up check, and it is cheap here:
// its dependencies are the current ones (the same pgx and SQLite
// modules), already in the build cache when the tests run, so the build
// takes 2 to 7 s, not the minute a cold cache would. It needs the commit
// in the clone's history (CI clones in full); in a shallow clone the test
// is skipped, saying so, and TestUpgradeFromEarlierSchemas still checks
// the old database.
//
// The migration's transaction is held open, after its DDL and before its
// commit, while the old instance serves: so the old instance is shown to
// run beside an open migration, not only before and after a quick one. A
// later migration that took a lock the old version's statements need
// fails here: with "ALTER TABLE plants ADD COLUMN note text" appended to
// 0002_webhooks.sql, the old instance answered 503 while it was held.
func TestUpgradeWhilePreviousVersionServes(t *testing.T) {
	pgtest.AdminURL(t)
	vs := earlierVersions(t)
	previous := vs[len(vs)-1]
	ctx := context.Background()
	f, url := restoreFixture(t, previous)
	bin := buildPrevious(t, f.Commit)
	old := startPrevious(t, bin, url)
	admin := f.secret("fixture-admin")

	// Writers through the old instance: each creates plants in an id range
	// of its own, renames every third and deletes every fifth, and
	// remembers what it was told was stored.
	const writers = 4
	var (
		ops      atomic.Int64
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		expected = make([]map[int64]*plantstore.Plant, writers)
		failures = make(chan string, 100)
	)
	for w := range writers {
		expected[w] = map[int64]*plantstore.Plant{}
		wg.Go(func() {
			for i := int64(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := int64(w+1)*1_000_000 + i
				p := plantstore.Plant{ID: id, Name: fmt.Sprintf("writer %d plant %d", w, i)}
				if i%2 == 0 {
					tag := fmt.Sprintf("w%d", w)
					p.Tag = &tag
				}
				type step struct {
					method, path string
					body         any
					status       int
				}
				renamed := p
				renamed.Name += " renamed"
				steps := []step{{"POST", "/plants", p, 200}}
				if i%3 == 0 {
					steps = append(steps, step{"PUT", fmt.Sprintf("/plants/%d", id), renamed, 200})
				}
				if i%5 == 0 {
					steps = append(steps, step{"DELETE", fmt.Sprintf("/plants/%d", id), nil, 204})
				}
				for _, s := range steps {
					status, body, err := old.call(s.method, s.path, admin, s.body)
					if err != nil || status != s.status {
						select {
						case failures <- fmt.Sprintf("%s %s through the old instance: %d %s %v", s.method, s.path, status, body, err):
						default:
						}
						return
					}
					ops.Add(1)
					switch s.method {
					case "POST":
						expected[w][id] = &p
					case "PUT":
						expected[w][id] = &renamed
					case "DELETE":
						expected[w][id] = nil
					}
				}
			}
		})
	}
	// waitOps waits until the writers have done n more operations.
	waitOps := func(n int64, during string) {
		t.Helper()
		target := ops.Load() + n
		deadline := time.After(30 * time.Second)
		for ops.Load() < target {
			select {
			case msg := <-failures:
				close(stop)
				wg.Wait()
				t.Fatalf("%s: %s\n%s", during, msg, old.logs())
			case <-deadline:
				close(stop)
				wg.Wait()
				t.Fatalf("%s: the old instance did %d of %d operations in 30 s\n%s", during, ops.Load()-(target-n), n, old.logs())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	waitOps(50, "before the upgrade")

	// Hold the migration open: this session inserts the next version's row
	// without committing, so the new instance's migration, having run its
	// DDL, waits on that row's key until we roll back.
	blocker, err := connect(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, 'held by the test', now())`, previous+1); err != nil {
		t.Fatal(err)
	}
	type opened struct {
		db  *postgres.DB
		err error
	}
	migrated := make(chan opened, 1)
	// Its own application_name, to find its session waiting.
	newURL, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	q := newURL.Query()
	q.Set("application_name", "plantstore-upgrade")
	newURL.RawQuery = q.Encode()
	go func() {
		db, err := postgres.Open(ctx, newURL.String(), postgres.Options{})
		migrated <- opened{db, err}
	}()
	waitMigrationHeld(t, url)
	opsBefore := ops.Load()
	if blocksWrites[previous+1] {
		// Its lock holds the old instance's writes; reads go on, and the
		// writes held go on once it commits, before their lock timeout.
		time.Sleep(time.Second)
		if status, body, err := old.call("GET", "/plants/1", admin, nil); err != nil || status != 200 {
			t.Fatalf("the old instance reads plant 1 while the migration is open: %d %s %v", status, body, err)
		}
	} else {
		waitOps(50, "while the migration is open")
	}
	heldOps := ops.Load() - opsBefore
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var db *postgres.DB
	select {
	case o := <-migrated:
		if o.err != nil {
			t.Fatalf("the new instance's Open: %v", o.err)
		}
		db = o.db
	case <-time.After(30 * time.Second):
		t.Fatal("the new instance's Open did not return within 30 s of the migration's release")
	}
	defer db.Close()
	if got := appliedMigrations(t, url); len(got) != knownMigrations(t) || strings.Contains(got[previous], "held by the test") {
		t.Fatalf("schema_migrations after the upgrade: %v", got)
	}

	// Both versions serve the migrated database together, as in the middle
	// of a rolling restart.
	sub, err := db.AddSubscriber(ctx, "https://hooks.example/plants", "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q=")
	if err != nil {
		t.Fatal(err)
	}
	waitOps(50, "after the upgrade, beside the new instance")
	var fromNew []plantstore.Plant
	for i := range 10 {
		p := plantstore.Plant{ID: 9_000_000 + int64(i), Name: fmt.Sprintf("new instance plant %d", i)}
		if _, err := db.CreatePlant(ctx, p); err != nil {
			t.Fatalf("the new instance's CreatePlant: %v", err)
		}
		fromNew = append(fromNew, p)
	}
	waitOps(50, "after the new instance's creates")
	close(stop)
	wg.Wait()
	select {
	case msg := <-failures:
		t.Fatalf("%s\n%s", msg, old.logs())
	default:
	}

	// Each instance reads what the other wrote.
	for _, p := range fromNew {
		status, body, err := old.call("GET", fmt.Sprintf("/plants/%d", p.ID), admin, nil)
		if err != nil || status != 200 || !strings.Contains(body, p.Name) {
			t.Errorf("the old instance reads plant %d: %d %s %v", p.ID, status, body, err)
		}
	}
	stored := storedPlants(t, db)
	written := 0
	for w := range writers {
		for id, want := range expected[w] {
			written++
			got, err := db.GetPlant(ctx, id)
			switch {
			case want == nil && plantstore.ErrorCode(err) != plantstore.ENOTFOUND:
				t.Errorf("plant %d, deleted through the old instance: %v, %v", id, got, err)
			case want != nil && (err != nil || !got.SameContent(*want)):
				t.Errorf("plant %d through the new instance = %v, %v; the old instance stored %v", id, got, err, *want)
			}
		}
	}
	for _, p := range f.plants() {
		if got, ok := stored[p.ID]; !ok || !got.SameContent(p) {
			t.Errorf("the fixture's plant %v is now %v (present %v)", p, got, ok)
		}
	}
	t.Logf("%d operations through the old instance on %d plants, %d of them while the migration was held open", ops.Load(), written, heldOps)

	// What a rolling upgrade from version 1 gives up, as docs/upgrades.md
	// says: a create served by an old instance writes no webhook delivery,
	// since version 1 knows no outbox, so only the new instance's creates
	// are pending. From version 2 on, both instances' creates are.
	all, err := db.Subscribers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	subs := checkUpgradedSubscribers(t, all, f, func(id int64) string { return subscriberSecret(t, url, id) })
	switch {
	case len(subs) != 1 || subs[0].ID != sub.ID:
		t.Errorf("Subscribers = %+v; want the fixture's and %d", all, sub.ID)
	case previous == 1 && subs[0].Pending != int64(len(fromNew)):
		t.Errorf("Subscribers = %+v; want %d pending, from the new instance's creates only", subs, len(fromNew))
	case previous > 1 && subs[0].Pending <= int64(len(fromNew)):
		t.Errorf("Subscribers = %+v; want more than the new instance's %d creates pending: the old instance's too", subs, len(fromNew))
	}

	// The old instance stops cleanly, and will not start again on the
	// migrated schema: rolling back means restoring, not restarting it.
	if code := old.stop(t); code != 0 {
		t.Errorf("the old instance exited %d on SIGTERM\n%s", code, old.logs())
	}
	restartCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(restartCtx, bin, "serve", "--addr", "127.0.0.1:0", "--db", url).CombinedOutput()
	want := fmt.Sprintf("database schema version %d is newer than this plantstore knows (%d); upgrade plantstore", knownMigrations(t), previous)
	if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != 1 || !strings.Contains(string(out), want) {
		t.Errorf("the old binary on the migrated database: %v\n%s\nwant exit status 1 and %q", err, out, want)
	}

	// Rolled back by hand, as docs/upgrades.md says, with the new instance
	// stopped: the old binary starts, and serves what the new one wrote.
	db.Close()
	undoMigrations(t, url, previous)
	again := startPrevious(t, bin, url)
	if status, body, err := again.call("GET", fmt.Sprintf("/plants/%d", fromNew[0].ID), admin, nil); err != nil || status != 200 || !strings.Contains(body, fromNew[0].Name) {
		t.Errorf("the old binary after the rollback, reading the new instance's plant: %d %s %v", status, body, err)
	}
	if code := again.stop(t); code != 0 {
		t.Errorf("the old instance exited %d on SIGTERM after the rollback\n%s", code, again.logs())
	}
}

// blocksWrites are the migrations whose locks hold the previous version's
// writes until they commit, as docs/upgrades.md says in its "While it
// runs" column: 6 adds columns to event_counter, which every write
// updates. TestUpgradeWhilePreviousVersionServes holds such a migration
// open for a second, less than the writes' lock timeout: they wait, and
// none fails.
var blocksWrites = map[int]bool{6: true}

// downMigrations undo each migration by hand, as docs/upgrades.md gives
// them for a rollback that keeps the plants and tokens written since the
// upgrade. Every migration needs an entry: its statements, or "" when
// docs/upgrades.md says it cannot be undone by hand.
var downMigrations = map[int]string{
	2: `DROP TABLE webhook_deliveries, webhook_subscribers;
		DELETE FROM schema_migrations WHERE version = 2;`,
	3: `DROP TABLE events, event_counter, event_horizon;
		DELETE FROM schema_migrations WHERE version = 3;`,
	4: `DROP TABLE webhook_subscriber_errors;
		DELETE FROM schema_migrations WHERE version = 4;`,
	5: `DROP TABLE webhook_subscriber_events;
		DELETE FROM webhook_deliveries WHERE event_type IS NOT NULL;
		DROP INDEX webhook_deliveries_waiting;
		ALTER TABLE webhook_deliveries DROP COLUMN first_failed_at, DROP COLUMN event_seq, DROP COLUMN event_type;
		DELETE FROM schema_migrations WHERE version = 5;`,
	6: `UPDATE event_horizon SET pruned_through = greatest(pruned_through, (SELECT lost_through FROM event_counter));
		ALTER TABLE event_counter DROP COLUMN lost_through, DROP COLUMN timeline;
		DELETE FROM schema_migrations WHERE version = 6;`,
}

// TestUpgradesDocGivesEachReversal holds docs/upgrades.md's PostgreSQL
// rollback to downMigrations, which TestMigrationsReversibleByHand runs:
// a step for every migration after the first, newest first, each the
// same statements.
func TestUpgradesDocGivesEachReversal(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "upgrades.md"))
	if err != nil {
		t.Fatal(err)
	}
	normal := func(sql string) string {
		sql = strings.ReplaceAll(strings.ReplaceAll(sql, "BEGIN;", ""), "COMMIT;", "")
		return strings.Join(strings.Fields(sql), " ")
	}
	for _, problem := range migration.CheckDocReversals(string(doc), "PostgreSQL:\n\n```sql\n", "-- %d -> %d", knownMigrations(t), downMigrations, normal) {
		t.Errorf("docs/upgrades.md, PostgreSQL: %s", problem)
	}
}

// undoMigrations runs the reversals from the current version down to
// version, in one transaction; it skips t if one has none.
func undoMigrations(t *testing.T, url string, version int) {
	t.Helper()
	var script strings.Builder
	script.WriteString("BEGIN;")
	for down := knownMigrations(t); down > version; down-- {
		stmts, ok := downMigrations[down]
		if !ok {
			t.Fatalf("migration %d has no entry in downMigrations: give its reversal (and in docs/upgrades.md), or \"\" if it has none", down)
		}
		if stmts == "" {
			t.Skipf("migration %d cannot be undone by hand (docs/upgrades.md)", down)
		}
		script.WriteString(stmts)
	}
	script.WriteString("COMMIT;")
	if _, err := connect(t, url).Exec(context.Background(), script.String()); err != nil {
		t.Fatalf("undo the migrations down to version %d: %v", version, err)
	}
}

// TestMigrationsReversibleByHand upgrades each fixture, writes to it, then
// runs the documented reversals back to the fixture's version: the schema
// is then exactly the one the earlier version had, and the plants written
// since are still there. The same reversals on a new database must also
// give the fixture's schema: a released migration edited since would not.
func TestMigrationsReversibleByHand(t *testing.T) {
	pgtest.AdminURL(t)
	for _, v := range earlierVersions(t) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			ctx := context.Background()
			_, url := restoreFixture(t, v)
			want, wantMigrations := pgSchema(t, url), appliedMigrations(t, url)
			db, err := postgres.Open(ctx, url, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.AddSubscriber(ctx, "https://hooks.example/plants", "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q="); err != nil {
				t.Fatal(err)
			}
			if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1000, Name: "Written after the upgrade"}); err != nil {
				t.Fatal(err)
			}
			latest, err := db.LatestEventID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			undoMigrations(t, url, v)
			if got := pgSchema(t, url); !slices.Equal(got, want) {
				t.Errorf("schema after the reversals:\n%s\nwant the fixture's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if got := appliedMigrations(t, url); !slices.Equal(got, wantMigrations) {
				t.Errorf("schema_migrations after the reversals: %v, want the fixture's %v", got, wantMigrations)
			}
			var n int
			if err := connect(t, url).QueryRow(ctx, `SELECT count(*) FROM plants WHERE id = 1000`).Scan(&n); err != nil || n != 1 {
				t.Errorf("the plant written after the upgrade: %d rows, %v", n, err)
			}
			if v < 3 {
				checkFeedCarriedOn(t, url, latest)
			}

			freshURL := pgtest.NewDatabase(t)
			db, err = postgres.Open(ctx, freshURL, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			undoMigrations(t, freshURL, v)
			if got := pgSchema(t, freshURL); !slices.Equal(got, want) {
				t.Errorf("a new database taken back to version %d:\n%s\nwant the fixture's:\n%s\n(a released migration must never change: add a new one)",
					v, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// checkFeedCarriedOn upgrades again, in docs/upgrades.md's two steps, the
// database at url, taken back to before the change feed when its newest
// event was latest: it migrates (as token list does), carries the feed on
// past latest, then serves. A client that followed the feed to latest
// gets 410, and the next change gets a later id, not one a client saw.
func checkFeedCarriedOn(t *testing.T, url string, latest int64) {
	t.Helper()
	ctx := context.Background()
	db, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	conn := connect(t, url)
	for _, stmt := range []string{
		`UPDATE event_counter SET last = greatest(last, $1::bigint + 1)`,
		`UPDATE event_horizon SET pruned_through = greatest(pruned_through, $1::bigint + 1)`,
	} {
		if _, err := conn.Exec(ctx, stmt, latest); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if db, err = postgres.Open(ctx, url, postgres.Options{}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.FeedGoesOnAfter(t, db, latest)
}

// pgSchema describes the public schema: columns, constraints, indexes and
// sequences, sorted.
func pgSchema(t *testing.T, url string) []string {
	t.Helper()
	rows, err := connect(t, url).Query(context.Background(), `
		SELECT format('column %s.%s %s null=%s default=%s identity=%s collation=%s', table_name, column_name,
			data_type, is_nullable, column_default, is_identity, collation_name)
		FROM information_schema.columns WHERE table_schema = 'public'
		UNION ALL
		SELECT format('constraint %s on %s: %s', conname, conrelid::regclass, pg_get_constraintdef(oid))
		FROM pg_constraint WHERE connamespace = 'public'::regnamespace
		UNION ALL
		SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
		UNION ALL
		SELECT 'sequence ' || sequencename FROM pg_sequences WHERE schemaname = 'public'
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitMigrationHeld waits until the new instance's migration waits on a
// lock: it has run the migration's statements and waits to record it.
func waitMigrationHeld(t *testing.T, url string) {
	t.Helper()
	observer := connect(t, url)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var query string
		err := observer.QueryRow(context.Background(), `SELECT query FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'plantstore-upgrade' AND wait_event_type = 'Lock'`).Scan(&query)
		if err == nil && strings.Contains(query, "schema_migrations") {
			return
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the new instance's migration never waited on the held schema_migrations row")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// buildPrevious builds cmd/plantstore as of commit, from git archive (no
// checkout, nothing in the clone changes), and returns the binary's path.
func buildPrevious(t *testing.T, commit string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("no git to build the previous version (%s) with: %v", commit, err)
	}
	if err := exec.Command("git", "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Skipf("commit %s, which made the fixture, is not in this clone's history (a shallow clone? git fetch --unshallow): %v", commit, err)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git clone, so the previous version (%s) cannot be built: %v", commit, err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	// From the top: in a subdirectory, git archive takes only that one.
	archive := exec.Command("git", "archive", "--format=tar", commit)
	archive.Dir = strings.TrimSpace(string(top))
	var tarball, stderr bytes.Buffer
	archive.Stdout, archive.Stderr = &tarball, &stderr
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, stderr.String())
	}
	if err := untar(&tarball, src); err != nil {
		t.Fatalf("unpack %s: %v", commit, err)
	}
	bin := filepath.Join(dir, "plantstore")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-o", bin, "./cmd/plantstore")
	build.Dir = src
	// Its own go.mod and go.sum, whatever the environment says.
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	start := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the previous version (%s): %v\n%s", commit, err, out)
	}
	t.Logf("built the previous version (%.12s) in %v", commit, time.Since(start).Round(time.Millisecond))
	return bin
}

func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("%q is outside the archive", h.Name)
		}
		path := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(path, b, os.FileMode(h.Mode)&0o777); err != nil {
				return err
			}
		}
	}
}

// previousInstance is the previous version's serve.
type previousInstance struct {
	cmd    *exec.Cmd
	url    string
	mu     sync.Mutex
	output bytes.Buffer
	done   chan error
	client *http.Client
}

func startPrevious(t *testing.T, bin, dbURL string) *previousInstance {
	t.Helper()
	s := &previousInstance{done: make(chan error, 1), client: &http.Client{Timeout: 30 * time.Second}}
	s.cmd = exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--db", dbURL)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		scan := bufio.NewScanner(stderr)
		scan.Buffer(make([]byte, 1<<20), 1<<20)
		for scan.Scan() {
			s.mu.Lock()
			s.output.Write(append(scan.Bytes(), '\n'))
			s.mu.Unlock()
			var line struct{ Msg, Addr string }
			if json.Unmarshal(scan.Bytes(), &line) == nil && line.Msg == "listening" {
				addr <- line.Addr
			}
		}
	}()
	go func() {
		<-scanned // Wait closes the pipe: read it all first
		s.done <- s.cmd.Wait()
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		err := <-s.done
		s.done <- err
	})
	select {
	case a := <-addr:
		s.url = "http://" + a
	case err := <-s.done:
		s.done <- err
		t.Fatalf("the previous version's serve exited: %v\n%s", err, s.logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("the previous version's serve did not listen within 30 s\n%s", s.logs())
	}
	return s
}

// logs is the end of the instance's log, for a failure's message.
func (s *previousInstance) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := strings.SplitAfter(s.output.String(), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "")
}

// call sends one request and returns the status and body.
func (s *previousInstance) call(method, path, token string, body any) (int, string, error) {
	var r io.Reader
	if body != nil {
		p := body.(plantstore.Plant)
		m := map[string]any{"id": p.ID, "name": p.Name}
		if p.Tag != nil {
			m["tag"] = *p.Tag
		}
		b, err := json.Marshal(m)
		if err != nil {
			return 0, "", err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// stop sends SIGTERM, as an orchestrator does, and returns the exit code.
func (s *previousInstance) stop(t *testing.T) int {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatal("the previous version's serve did not exit within 30 s of SIGTERM")
		return -1
	}
}

// subscriberSecret reads a subscriber's secret, which the store never
// lists.
func subscriberSecret(t *testing.T, url string, id int64) string {
	t.Helper()
	var secret string
	if err := connect(t, url).QueryRow(context.Background(), `SELECT secret FROM webhook_subscribers WHERE id = $1`, id).Scan(&secret); err != nil {
		t.Errorf("subscriber %d's secret: %v", id, err)
	}
	return secret
}
