package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/migration"
	"github.com/plantstore/plantstore/internal/storetest"
)

// upgradeFixture is a store written by an earlier plantstore, and what it
// holds: testdata/upgrade/vN.db and vN.json, made by make.sh beside them.
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

func readUpgradeFixture(t *testing.T, path string) upgradeFixture {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f upgradeFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

func (f upgradeFixture) plants() []plantstore.Plant {
	ps := make([]plantstore.Plant, len(f.Plants))
	for i, p := range f.Plants {
		ps[i] = plantstore.Plant{ID: p.ID, Name: p.Name, Tag: p.Tag}
	}
	slices.SortFunc(ps, func(a, b plantstore.Plant) int { return cmp.Compare(a.ID, b.ID) })
	return ps
}

// neverNewest are the schema versions no commit on main ended at: each
// arrived in one commit with the version after it, so no binary ever ran
// at it, no store can be at it, and it has no fixture. (4, the change
// feed, came with 5, the webhook subscribers' last error; 6 has v6.db.)
var neverNewest = map[int]bool{4: true, 5: true}

// earlierVersions are the schema versions before current that a binary
// ran at: each has its fixture.
func earlierVersions(current int) []int {
	var vs []int
	for v := 1; v < current; v++ {
		if !neverNewest[v] {
			vs = append(vs, v)
		}
	}
	return vs
}

// TestUpgradeFromEarlierSchemas opens each store an earlier plantstore
// wrote, as serve does, and checks that it migrates to the current schema
// with its tokens and plants intact, and takes every kind of write.
func TestUpgradeFromEarlierSchemas(t *testing.T) {
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	// Every earlier version needs its fixture: a new migration makes the
	// current version an earlier one (make.sh adds its fixture).
	for _, v := range earlierVersions(len(ms)) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) { testUpgrade(t, v, len(ms)) })
	}
}

func testUpgrade(t *testing.T, version, current int) {
	ctx := context.Background()
	manifest := filepath.Join("testdata", "upgrade", fmt.Sprintf("v%d.json", version))
	if _, err := os.Stat(manifest); err != nil {
		t.Fatalf("no fixture for schema version %d: add one with testdata/upgrade/make.sh (%v)", version, err)
	}
	f := readUpgradeFixture(t, manifest)
	if f.SchemaVersion != version {
		t.Fatalf("%s says schema version %d, want %d", manifest, f.SchemaVersion, version)
	}
	path := copyFixture(t, version)
	before := appliedMigrations(t, path)
	if len(before) != version {
		t.Fatalf("the fixture records migrations %v, want versions 1 to %d", before, version)
	}
	oldEvents, oldLatest := fixtureEvents(t, path)

	db, err := Open(ctx, path, Options{SoleServer: true})
	if err != nil {
		t.Fatalf("open the version %d store (from %.12s): %v", version, f.Commit, err)
	}
	defer func() { db.Close() }()

	after := appliedMigrations(t, path)
	if len(after) != current {
		t.Fatalf("after opening, migrations %v, want versions 1 to %d", after, current)
	}
	for v, m := range before {
		if after[v] != m {
			t.Errorf("migration %d was %v, is now %v: an applied migration must not be applied again", v, m, after[v])
		}
	}

	checkUpgradedTokens(t, db, f)
	checkUpgradedPlants(t, db, f.plants())
	checkUpgradedEvents(t, db, oldEvents, oldLatest)
	secretOf := func(id int64) string {
		conn := openReadOnly(t, path)
		defer conn.Close()
		var secret string
		if err := conn.QueryRow(`SELECT secret FROM webhook_subscribers WHERE id = ?`, id).Scan(&secret); err != nil {
			t.Errorf("subscriber %d's secret: %v", id, err)
		}
		return secret
	}
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

	// Every kind of write, on the migrated file.
	tag := "upgraded"
	sub, err := db.AddSubscriber(ctx, "https://hooks.example/plants", "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q=")
	if err != nil {
		t.Fatalf("AddSubscriber: %v", err)
	}
	if created, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1000, Name: "New after upgrade", Tag: &tag}); err != nil || !created {
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
	// The fixture's pending deliveries, and the one create after
	// AddSubscriber's, to the new subscriber and to each of the fixture's.
	wantPending := int64(1 + len(f.Subscribers))
	for _, sub := range f.Subscribers {
		wantPending += sub.Pending
	}
	if counts, err := db.CountDeliveries(ctx); err != nil || counts.Pending != wantPending {
		t.Errorf("CountDeliveries = %+v, %v; want %d pending: the fixture's and the one create after AddSubscriber's", counts, err, wantPending)
	}
	if _, err := db.CreateToken(ctx, plantstore.Token{Name: "after-upgrade", Scopes: plantstore.KnownScopes}, plantstore.HashToken("pst_after")); err != nil {
		t.Errorf("CreateToken: %v", err)
	}
	if err := db.RevokeToken(ctx, "fixture-admin", time.Now()); err != nil {
		t.Errorf("RevokeToken: %v", err)
	}

	// Closed and opened again, as at the next restart: nothing to migrate,
	// everything still there.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(ctx, path, Options{SoleServer: true})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if again := appliedMigrations(t, path); !slices.Equal(again, after) {
		t.Errorf("migrations after a restart %v, want %v", again, after)
	}
	want := f.plants()
	want[0] = updated
	want = slices.DeleteFunc(want, func(p plantstore.Plant) bool { return p.ID == deleted })
	want = append(want, plantstore.Plant{ID: 1000, Name: "New after upgrade", Tag: &tag})
	slices.SortFunc(want, func(a, b plantstore.Plant) int { return cmp.Compare(a.ID, b.ID) })
	checkUpgradedPlants(t, db, want)
	if subs, err := db.Subscribers(ctx); err != nil {
		t.Error(err)
	} else if rest := checkUpgradedSubscribers(t, subs, f, secretOf); len(rest) != 1 || rest[0].ID != sub.ID || rest[0].Pending != 1 {
		t.Errorf("Subscribers after a restart = %+v; want the fixture's and %d with 1 pending", subs, sub.ID)
	}
	if _, err := db.TokenByHash(ctx, plantstore.HashToken(f.Tokens[0].Secret)); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("the revoked fixture-admin: %v, want ENOTFOUND", err)
	}
	// The feed: the fixture's events, then the create, update and delete
	// above, numbered on from the fixture's last id.
	tagged := plantstore.Plant{ID: 1000, Name: "New after upgrade", Tag: &tag}
	oldPlant := f.plants()[1]
	later := []plantstore.Event{
		{ID: oldLatest + 1, Type: plantstore.EventCreated, Plant: tagged},
		{ID: oldLatest + 2, Type: plantstore.EventUpdated, Plant: updated},
		{ID: oldLatest + 3, Type: plantstore.EventDeleted, Plant: oldPlant},
	}
	checkUpgradedEvents(t, db, append(oldEvents, later...), oldLatest+3)
	checkIntegrity(t, path)
}

// fixtureEvents reads the change feed of the fixture at path, as the
// earlier version wrote it (one row a change), and the last id it gave;
// none before the feed (schema version 4).
func fixtureEvents(t *testing.T, path string) ([]plantstore.Event, int64) {
	t.Helper()
	conn := openReadOnly(t, path)
	defer conn.Close()
	var feed int
	if err := conn.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = 'events'`).Scan(&feed); err != nil || feed == 0 {
		return nil, 0
	}
	rows, err := conn.Query(`SELECT id, type, plant_id, name, tag, at FROM events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var events []plantstore.Event
	for rows.Next() {
		var e plantstore.Event
		var tag sql.NullString
		var at int64
		if err := rows.Scan(&e.ID, &e.Type, &e.Plant.ID, &e.Plant.Name, &tag, &at); err != nil {
			t.Fatal(err)
		}
		if tag.Valid {
			e.Plant.Tag = &tag.String
		}
		e.At = time.UnixMilli(at).UTC()
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var latest int64
	if err := conn.QueryRow(`SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)`).Scan(&latest); err != nil {
		t.Fatal(err)
	}
	return events, latest
}

// sameEvent reports whether got is the event want: its id, type, plant,
// and time, unless want has none.
func sameEvent(got, want plantstore.Event) bool {
	return got.ID == want.ID && got.Type == want.Type && got.Plant.ID == want.Plant.ID && got.Plant.SameContent(want.Plant) &&
		(want.At.IsZero() || got.At.Equal(want.At))
}

// openReadOnly opens the SQLite file at path read-only, for a test to
// look at it beside the store.
func openReadOnly(t *testing.T, path string) *sql.DB {
	t.Helper()
	conn, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// checkUpgradedEvents compares the store's change feed with want (their
// times too, but for events without one: written by this test), whole,
// by pages, and by type, and its latest id with latest.
func checkUpgradedEvents(t *testing.T, db *DB, want []plantstore.Event, latest int64) {
	t.Helper()
	ctx := context.Background()
	same := func(what string, got, want []plantstore.Event) {
		t.Helper()
		if !slices.EqualFunc(got, want, sameEvent) {
			t.Errorf("%s = %+v, want %+v", what, got, want)
		}
	}
	all, err := db.Events(ctx, plantstore.EventQuery{FromOldest: true, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	same("Events", all, want)
	var paged []plantstore.Event
	for after := int64(0); ; {
		page, err := db.Events(ctx, plantstore.EventQuery{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, page...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].ID
	}
	same("Events by pages of 2", paged, want)
	for _, typ := range plantstore.EventTypes {
		got, err := db.Events(ctx, plantstore.EventQuery{Limit: 1000, Types: []string{typ}})
		if err != nil {
			t.Fatal(err)
		}
		same("Events of type "+typ, got, slices.DeleteFunc(slices.Clone(want), func(e plantstore.Event) bool { return e.Type != typ }))
	}
	if got, err := db.LatestEventID(ctx); err != nil || got != latest {
		t.Errorf("LatestEventID = %d, %v; want %d", got, err, latest)
	}
}

// copyFixture copies the fixture of schema version v into a directory of
// the test's own and returns the copy's path: the test must never change
// testdata, and opening a file in WAL mode, even to read, creates files
// beside it.
func copyFixture(t *testing.T, v int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "upgrade", fmt.Sprintf("v%d.db", v)))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "plantstore.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// appliedMigrations reads schema_migrations straight from the file, as
// "version name applied_at" by version from 1.
func appliedMigrations(t *testing.T, path string) []string {
	t.Helper()
	conn := openReadOnly(t, path)
	defer conn.Close()
	rows, err := conn.Query(`SELECT version, name, applied_at FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ms []string
	for rows.Next() {
		var v int
		var name string
		var at int64
		if err := rows.Scan(&v, &name, &at); err != nil {
			t.Fatal(err)
		}
		if v != len(ms)+1 {
			t.Fatalf("schema_migrations skips to version %d after %v", v, ms)
		}
		ms = append(ms, fmt.Sprintf("%d %s %d", v, name, at))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ms
}

func checkIntegrity(t *testing.T, path string) {
	t.Helper()
	conn := openReadOnly(t, path)
	defer conn.Close()
	var ok string
	if err := conn.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Errorf("integrity_check: %q, %v", ok, err)
	}
	rows, err := conn.Query(`PRAGMA foreign_key_check`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if rows.Next() {
		t.Error("foreign_key_check found rows that reference nothing")
	}
}

func checkUpgradedTokens(t *testing.T, db *DB, f upgradeFixture) {
	t.Helper()
	ctx := context.Background()
	for _, want := range f.Tokens {
		got, err := db.TokenByHash(ctx, plantstore.HashToken(want.Secret))
		if want.Revoked {
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
	revoked := 0
	for _, tok := range all {
		if !tok.RevokedAt.IsZero() {
			revoked++
		}
		// The fixture's admin created every plant through the old server,
		// which recorded the use at shutdown.
		if tok.Name == "fixture-admin" && tok.LastUsedAt.IsZero() {
			t.Errorf("fixture-admin lost its last use: %+v", tok)
		}
	}
	if want := countRevoked(f); revoked != want {
		t.Errorf("%d revoked tokens, want %d", revoked, want)
	}
	active, err := db.ListTokens(ctx, false)
	if err != nil || len(active) != len(f.Tokens)-countRevoked(f) {
		t.Errorf("ListTokens(active) = %+v, %v", active, err)
	}
}

func countRevoked(f upgradeFixture) int {
	n := 0
	for _, tok := range f.Tokens {
		if tok.Revoked {
			n++
		}
	}
	return n
}

// checkUpgradedPlants compares the store's plants with want (in id order):
// one by one, listed whole, listed by pages, and listed by each tag.
func checkUpgradedPlants(t *testing.T, db *DB, want []plantstore.Plant) {
	t.Helper()
	ctx := context.Background()
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
	all, err := db.ListPlants(ctx, plantstore.ListOptions{Limit: plantstore.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	same("ListPlants", all, want)
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
		var wantTagged []plantstore.Plant
		for _, p := range want {
			if p.Tag != nil && *p.Tag == tag {
				wantTagged = append(wantTagged, p)
			}
		}
		same(fmt.Sprintf("ListPlants(tag %q)", tag), got, wantTagged)
	}
}

// downMigrations undo each migration by hand, as docs/upgrades.md gives
// them for a rollback that keeps the plants and tokens written since the
// upgrade. Every migration needs an entry: its statements, or "" when
// docs/upgrades.md says it cannot be undone by hand.
var downMigrations = map[int]string{
	2: `DROP INDEX plants_by_tag;
		DELETE FROM schema_migrations WHERE version = 2;`,
	3: `DROP TABLE webhook_deliveries;
		DROP TABLE webhook_subscribers;
		DELETE FROM schema_migrations WHERE version = 3;`,
	4: keepFeedHorizon + `
		DROP TABLE events;
		DROP TABLE event_horizon;
		DELETE FROM sqlite_sequence WHERE name = 'events';
		DELETE FROM schema_migrations WHERE version = 4;`,
	5: `DROP TABLE webhook_subscriber_errors;
		DELETE FROM schema_migrations WHERE version = 5;`,
	6: `DROP TABLE webhook_subscriber_events;
		DELETE FROM webhook_deliveries WHERE event_type IS NOT NULL;
		DROP INDEX webhook_deliveries_waiting;
		ALTER TABLE webhook_deliveries DROP COLUMN first_failed_at;
		ALTER TABLE webhook_deliveries DROP COLUMN event_seq;
		ALTER TABLE webhook_deliveries DROP COLUMN event_type;
		DELETE FROM schema_migrations WHERE version = 6;`,
	7: reverseOutboxCursor + `
		DROP TABLE outbox_cursor;
		ALTER TABLE webhook_subscribers DROP COLUMN since_event;
		DELETE FROM schema_migrations WHERE version = 7;`,
	8: unpackEventBatches,
}

// keepFeedHorizon is the first step of undoing the change feed: the id
// after the last it gave, kept where a later upgrade carries it on
// (applyCarriedHorizon, as for a restore of a copy from before the feed),
// so that the feed then starts after the ids clients saw, not at 1 again,
// and a client following from one of them gets 410. The versions before
// the feed leave the table alone.
const keepFeedHorizon = `CREATE TABLE IF NOT EXISTS carried_event_horizon (through INTEGER NOT NULL);
		DELETE FROM carried_event_horizon;
		INSERT INTO carried_event_horizon (through) SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
			coalesce((SELECT max(id) FROM events), 0), (SELECT pruned_through FROM event_horizon)) + 1;`

// withoutCarriedHorizon is schema without the table keepFeedHorizon adds
// to a store taken back before the feed.
func withoutCarriedHorizon(schema []string) []string {
	return slices.DeleteFunc(schema, func(line string) bool { return strings.Contains(line, "carried_event_horizon") })
}

// A command-line tool of a newer version does not upgrade a store that an
// older serve is using: that server would go on writing without what the
// new schema adds, and could not start again. Once the server is gone,
// the tool (or the new serve) upgrades it.
func TestNoUpgradeUnderARunningServer(t *testing.T) {
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	older := len(ms) - 1
	path := copyFixture(t, older)
	server, _, err := lockSoleServer(path) // as an older serve holds it
	if err != nil {
		t.Fatal(err)
	}
	before := appliedMigrations(t, path)
	_, err = Open(context.Background(), path, Options{BusyTimeout: 300 * time.Millisecond})
	want := fmt.Sprintf("the store is at schema version %d and a plantstore serve is using it, of an older version (or one still upgrading it after --busy-timeout, 300ms)", older)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "docs/upgrades.md") {
		t.Fatalf("a tool opening a store an older server uses: %v; want %q", err, want)
	}
	if after := appliedMigrations(t, path); !slices.Equal(after, before) {
		t.Errorf("the refused tool migrated the store: %v, was %v", after, before)
	}
	server.Close() // the server stops
	db, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatalf("the tool after the server stopped: %v", err)
	}
	db.Close()
	if after := appliedMigrations(t, path); len(after) != len(ms) {
		t.Errorf("after the server stopped, the tool left versions %v; want all %d", after, len(ms))
	}

	// A serve of this version, upgrading the store as the tool opens it
	// (a script that starts serve, then makes a token): the tool waits
	// for the upgrade, and opens the store.
	path = copyFixture(t, older)
	server, _, err = lockSoleServer(path)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	upgraded := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate")
		if err != nil {
			upgraded <- err
			return
		}
		defer db.Close()
		m := ms[len(ms)-1]
		tx, err := db.Begin()
		if err == nil {
			_, err = tx.Exec(m.SQL)
		}
		if err == nil {
			_, err = tx.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`, m.Version, m.Name, time.Now().UnixMilli())
		}
		if err == nil {
			err = tx.Commit()
		}
		upgraded <- err
	}()
	db, err = Open(context.Background(), path, Options{BusyTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("a tool opening a store this version's serve is upgrading: %v", err)
	}
	db.Close()
	if err := <-upgraded; err != nil {
		t.Fatal(err)
	}
}

// TestUpgradesDocGivesEachReversal holds docs/upgrades.md's SQLite
// rollback, sqlite3 commands on the stopped store, to downMigrations,
// which TestMigrationsReversibleByHand runs: a step for every migration
// after the first, newest first, each the same statements.
func TestUpgradesDocGivesEachReversal(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "upgrades.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The statements of a step, as the shell hands them to sqlite3.
	normal := func(sql string) string {
		sql = strings.ReplaceAll(sql, `sqlite3 ./plantstore.db "`, "")
		sql = strings.ReplaceAll(sql, `COMMIT;"`, "")
		sql = strings.ReplaceAll(sql, "BEGIN IMMEDIATE;", "")
		sql = strings.ReplaceAll(sql, `\$`, "$")
		return strings.Join(strings.Fields(sql), " ")
	}
	for _, problem := range migration.CheckDocReversals(string(doc), "SQLite, with the `sqlite3` shell on the stopped store:\n\n```sh\n", "# %d -> %d", knownVersion(t), downMigrations, normal) {
		t.Errorf("docs/upgrades.md, SQLite: %s", problem)
	}
}

// unpackEventBatches gives each event of event_batches its row in events
// again, and sqlite_sequence the last id given.
const unpackEventBatches = `CREATE TABLE events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    type     TEXT    NOT NULL, -- plant.created, plant.updated or plant.deleted
    plant_id INTEGER NOT NULL,
    name     TEXT    NOT NULL, -- the plant as the change left it (for a delete, as it was)
    tag      TEXT,
    at       INTEGER NOT NULL  -- Unix milliseconds
);
		INSERT INTO events (id, type, plant_id, name, tag, at)
		SELECT b.last - (b.created + b.updated + b.deleted) + 1 + j.key,
		       json_extract(j.value, '$.type'), json_extract(j.value, '$.id'),
		       json_extract(j.value, '$.name'), json_extract(j.value, '$.tag'), b.at
		FROM event_batches b, json_each(b.changes) j ORDER BY 1;
		INSERT INTO sqlite_sequence (name, seq) SELECT 'events', pruned_through FROM event_horizon
		WHERE pruned_through > 0 AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events');
		UPDATE sqlite_sequence SET seq = max(seq, (SELECT pruned_through FROM event_horizon)) WHERE name = 'events';
		DROP TABLE event_batches;
		DELETE FROM schema_migrations WHERE version = 8;`

// reverseOutboxCursor writes the outbox rows of the events after the
// cursor, which version 6 would have written with each change.
const reverseOutboxCursor = `INSERT INTO webhook_deliveries (subscriber_id, event_id, plant_id, name, tag, created_at, next_attempt_at, event_type, event_seq)
		SELECT s.id, 'msg_' || lower(hex(randomblob(13))), e.plant_id, e.name, e.tag, e.at, e.at, nullif(e.type, 'plant.created'), e.id
		FROM events e JOIN webhook_subscribers s ON s.since_event < e.id
		LEFT JOIN webhook_subscriber_events t ON t.subscriber_id = s.id
		WHERE e.id > (SELECT through FROM outbox_cursor) AND s.disabled_at IS NULL
		  AND CASE e.type WHEN 'plant.created' THEN coalesce(t.created, 1) WHEN 'plant.updated' THEN coalesce(t.updated, 0) ELSE coalesce(t.deleted, 0) END
		ORDER BY e.id, s.id;`

// TestMigrationsReversibleByHand upgrades each fixture, writes to it, then
// runs the documented reversals back to the fixture's version: the schema
// is then exactly the one the earlier version wrote, and the plants
// written since are still there. The same reversals on a new store must
// also give the fixture's schema: a released migration edited since would
// not.
func TestMigrationsReversibleByHand(t *testing.T) {
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range earlierVersions(len(ms)) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			ctx := context.Background()
			// Copies, the one to migrate and one to compare with: even
			// reading a file in WAL mode creates files beside it, and
			// testdata must not change.
			fixture := copyFixture(t, v)
			path := copyFixture(t, v)
			db, err := Open(ctx, path, Options{SoleServer: true})
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
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			undoMigrations(t, path, len(ms), v)
			if got, want := withoutCarriedHorizon(sqliteSchema(t, path)), sqliteSchema(t, fixture); !slices.Equal(got, want) {
				t.Errorf("schema after the reversals:\n%s\nwant the fixture's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if got, want := appliedMigrations(t, path), appliedMigrations(t, fixture); !slices.Equal(got, want) {
				t.Errorf("schema_migrations after the reversals: %v, want the fixture's %v", got, want)
			}
			conn := openReadOnly(t, path)
			defer conn.Close()
			var n int
			if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM plants WHERE id = 1000`).Scan(&n); err != nil || n != 1 {
				t.Errorf("the plant written after the upgrade: %d rows, %v", n, err)
			}
			// The change feed, one row a change again: the fixture's events,
			// then the create above, numbered on.
			if v >= 6 {
				want, latest := fixtureEvents(t, fixture)
				got, gotLatest := fixtureEvents(t, path)
				if len(got) != len(want)+1 || !slices.EqualFunc(got[:len(want)], want, sameEvent) || got[len(want)].ID != latest+1 || got[len(want)].Plant.ID != 1000 || gotLatest != latest+1 {
					t.Errorf("the feed after the reversals: %+v (last id %d); want the fixture's %+v (last id %d) and the create of plant 1000", got, gotLatest, want, latest)
				}
			}
			// Its webhook deliveries, for the fixture's subscribers and the
			// one added: version 7 had not written them yet (they were in
			// the change feed, after the outbox cursor), its reversal did.
			if v == 7 {
				var after int
				if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE plant_id = 1000 AND id > (SELECT through FROM outbox_cursor)`).Scan(&after); err != nil || after != 1 {
					t.Errorf("the create of plant 1000 after the outbox cursor: %d, %v; want 1", after, err)
				}
			} else if v >= 3 {
				f := readUpgradeFixture(t, filepath.Join("testdata", "upgrade", fmt.Sprintf("v%d.json", v)))
				if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries WHERE plant_id = 1000 AND failed_at IS NULL`).Scan(&n); err != nil || n != 1+len(f.Subscribers) {
					t.Errorf("the deliveries of the plant written after the upgrade: %d, %v; want %d", n, err, 1+len(f.Subscribers))
				}
				// With webhook-ids of the documented form (api/openapi.yaml).
				var bad int
				if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries WHERE plant_id = 1000
					AND (length(event_id) != 30 OR substr(event_id, 1, 4) != 'msg_' OR substr(event_id, 5) GLOB '*[^0-9a-hjkmnp-tv-z]*')`).Scan(&bad); err != nil || bad != 0 {
					t.Errorf("%d deliveries with a webhook-id not of the form msg_ and 26 of [0-9a-hjkmnp-tv-z], %v", bad, err)
				}
			}
			conn.Close()
			checkIntegrity(t, path)
			if v < 4 {
				checkFeedGoesOnAfter(t, path, latest)
			}

			fresh := filepath.Join(t.TempDir(), "fresh.db")
			db, err = Open(ctx, fresh, Options{})
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			undoMigrations(t, fresh, len(ms), v)
			if got, want := withoutCarriedHorizon(sqliteSchema(t, fresh)), sqliteSchema(t, fixture); !slices.Equal(got, want) {
				t.Errorf("a new store taken back to version %d:\n%s\nwant the fixture's:\n%s\n(a released migration must never change: add a new one)",
					v, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// checkFeedGoesOnAfter upgrades again the store at path, taken back to
// before the change feed when its newest event was latest, and checks
// that the feed goes on after that id: a client that followed the feed to
// it gets 410 (the changes made meanwhile have no events), and the next
// change gets a later id, not one a client saw for another change.
func checkFeedGoesOnAfter(t *testing.T, path string, latest int64) {
	t.Helper()
	ctx := context.Background()
	db, err := Open(ctx, path, Options{SoleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.FeedGoesOnAfter(t, db, latest)
}

// undoMigrations runs the reversals of downMigrations on the file at path,
// from version from down to version to, each in a transaction; it skips
// t if one has none.
func undoMigrations(t *testing.T, path string, from, to int) {
	t.Helper()
	conn, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for down := from; down > to; down-- {
		stmts, ok := downMigrations[down]
		if !ok {
			t.Fatalf("migration %d has no entry in downMigrations: give its reversal (and in docs/upgrades.md), or \"\" if it has none", down)
		}
		if stmts == "" {
			t.Skipf("migration %d cannot be undone by hand (docs/upgrades.md)", down)
		}
		if _, err := conn.Exec("BEGIN IMMEDIATE;" + stmts + "COMMIT;"); err != nil {
			t.Fatalf("undo migration %d: %v", down, err)
		}
	}
}

// sqliteSchema lists a file's tables, indexes and their SQL, sorted.
func sqliteSchema(t *testing.T, path string) []string {
	t.Helper()
	conn := openReadOnly(t, path)
	defer conn.Close()
	rows, err := conn.Query(`SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ, name, table, stmt string
		if err := rows.Scan(&typ, &name, &table, &stmt); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s on %s: %s", typ, name, table, stmt))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
