package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
)

// fillForBackup gives db a little of everything a store holds: plants
// with and without tags, an active, a used and a revoked token, a
// subscriber and its pending deliveries.
func fillForBackup(t *testing.T, db *DB) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.AddSubscriber(ctx, "https://hooks.example.com/plants", "whsec_c2VjcmV0"); err != nil {
		t.Fatal(err)
	}
	for i := range int64(50) {
		p := plantstore.Plant{ID: i*7 - 20, Name: fmt.Sprintf("plant %d", i)}
		if i%3 == 0 {
			tag := fmt.Sprintf("tag %d", i%4)
			p.Tag = &tag
		}
		if _, err := db.CreatePlant(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"deploy", "used", "gone"} {
		tok, err := db.CreateToken(ctx, plantstore.Token{Name: name, Scopes: plantstore.KnownScopes}, plantstore.HashToken(plantstore.NewToken()))
		if err != nil {
			t.Fatal(err)
		}
		if name == "used" {
			if err := db.RecordTokenUse(ctx, map[int64]time.Time{tok.ID: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.RevokeToken(ctx, "gone", time.Now()); err != nil {
		t.Fatal(err)
	}
}

// dumpRows reads every row of every table of the SQLite file at path,
// the schema included, as text.
func dumpRows(t *testing.T, path string) map[string][]string {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	dump := map[string][]string{"sqlite_schema": query(t, raw, `SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name`)}
	var tables []string
	for _, row := range query(t, raw, `SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name`) {
		tables = append(tables, strings.Trim(row, "[]"))
	}
	for _, table := range tables {
		dump[table] = query(t, raw, fmt.Sprintf(`SELECT * FROM %q ORDER BY rowid`, table))
	}
	return dump
}

func query(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		values := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range values {
			ptrs[i] = &values[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(values))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameRows(t *testing.T, what string, got, want map[string][]string) {
	t.Helper()
	for _, table := range slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	}) {
		g, w := got[table], want[table]
		if i := firstDifference(g, w); i >= 0 {
			t.Errorf("%s: table %s has %d rows, want %d; the first difference, at row %d:\ngot  %s\nwant %s",
				what, table, len(g), len(w), i, rowAt(g, i), rowAt(w, i))
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d tables, want %d", what, len(got), len(want))
	}
}

// firstDifference is the index of the first row where a and b differ, or
// -1 when they are equal.
func firstDifference(a, b []string) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return -1
}

func rowAt(rows []string, i int) string {
	if i < len(rows) {
		return rows[i]
	}
	return "(none)"
}

func knownVersion(t *testing.T) int {
	t.Helper()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}

func mustBackup(t *testing.T, from string) string {
	t.Helper()
	to := filepath.Join(t.TempDir(), "backup.db")
	if _, err := Backup(context.Background(), from, to, time.Second); err != nil {
		t.Fatal(err)
	}
	return to
}

// A backup of an open store holds every row of every table, passes the
// integrity check, and leaves nothing else behind but its checksum.
func TestBackupCopiesEveryRow(t *testing.T) {
	db, path := openTest(t, Options{SoleServer: true}) // beside a server
	fillForBackup(t, db)
	dir := t.TempDir()
	to := filepath.Join(dir, "plants.backup")
	info, err := Backup(context.Background(), path, to, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != to || info.Plants != 50 || info.SchemaVersion != knownVersion(t) || info.Bytes <= 0 {
		t.Errorf("info = %+v", info)
	}
	if st, err := os.Stat(to); err != nil || st.Size() != info.Bytes || st.Mode().Perm() != 0o600 {
		t.Errorf("the backup file: %v, %v; want %d bytes, mode 0600", st, err, info.Bytes)
	}
	sameRows(t, "backup", dumpRows(t, to), dumpRows(t, path))
	if _, err := inspect(context.Background(), to); err != nil {
		t.Errorf("the backup: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the backup's directory holds %v, want the backup and its checksum alone", entries)
	}
}

func TestBackupRefusesAnExistingFile(t *testing.T) {
	_, path := openTest(t, Options{})
	to := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(to, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Backup(context.Background(), path, to, time.Second); !errors.Is(err, fs.ErrExist) {
		t.Errorf("backup onto a file: %v, want ErrExist", err)
	}
	if b, _ := os.ReadFile(to); string(b) != "keep me" {
		t.Errorf("the file was changed: %q", b)
	}
	missing := filepath.Join(t.TempDir(), "missing.db")
	if _, err := Backup(context.Background(), missing, filepath.Join(t.TempDir(), "b"), time.Second); err == nil {
		t.Error("backup of a missing store succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("backup created the store it was asked to copy: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Backup(context.Background(), empty, filepath.Join(t.TempDir(), "b"), time.Second); !errors.Is(err, ErrNoStore) {
		t.Errorf("backup of an empty file: %v, want ErrNoStore", err)
	}
}

// Writers go on while the backup runs; it holds every plant acknowledged
// before it began, and only plants that were sent.
func TestBackupDuringWrites(t *testing.T) {
	db, path := openTest(t, Options{SoleServer: true})
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	acked := map[int64]bool{}
	var writers sync.WaitGroup
	for w := range int64(4) {
		writers.Go(func() {
			for i := int64(0); ctx.Err() == nil; i++ {
				id := w<<32 | i
				if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "p"}); err == nil {
					mu.Lock()
					acked[id] = true
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	before := len(acked)
	beforeIDs := make([]int64, 0, before)
	for id := range acked {
		beforeIDs = append(beforeIDs, id)
	}
	mu.Unlock()
	to := filepath.Join(t.TempDir(), "backup.db")
	info, err := Backup(context.Background(), path, to, time.Second)
	time.Sleep(50 * time.Millisecond)
	cancel()
	writers.Wait()
	if err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(t.TempDir(), "restored.db")
	if _, err := Restore(context.Background(), to, restored, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	restoredDB, err := Open(context.Background(), restored, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer restoredDB.Close()
	for _, id := range beforeIDs {
		if _, err := restoredDB.GetPlant(context.Background(), id); err != nil {
			t.Errorf("plant %d, acknowledged before the backup: %v", id, err)
		}
	}
	if info.Plants < int64(before) || info.Plants > int64(len(acked)) {
		t.Errorf("the backup holds %d plants; %d were acknowledged before it, %d in all", info.Plants, before, len(acked))
	}
	t.Logf("%d plants acknowledged before the backup, %d in it, %d in all", before, info.Plants, len(acked))
}

// A restored store is the backup, row for row; a store at the target is
// replaced only when asked, and then its old write-ahead log is not
// replayed onto the restored file.
func TestRestore(t *testing.T) {
	db, path := openTest(t, Options{})
	fillForBackup(t, db)
	backup := mustBackup(t, path)
	want := dumpRows(t, backup)

	to := filepath.Join(t.TempDir(), "restored.db")
	info, err := Restore(context.Background(), backup, to, RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != to || info.Plants != 50 || info.SchemaVersion != knownVersion(t) {
		t.Errorf("info = %+v", info)
	}
	sameRows(t, "restored", dumpRows(t, to), want)
	restored, err := Open(context.Background(), to, Options{SoleServer: true})
	if err != nil {
		t.Fatalf("serving the restored store: %v", err)
	}
	if p, err := restored.GetPlant(context.Background(), -20); err != nil || p.Name != "plant 0" {
		t.Errorf("plant -20 of the restored store: %+v, %v", p, err)
	}
	restored.Close()

	// Another store, left as a crash leaves it: its log beside it.
	other, otherPath := openTest(t, Options{})
	for i := range int64(20) {
		if _, err := other.CreatePlant(context.Background(), plantstore.Plant{ID: i, Name: "other"}); err != nil {
			t.Fatal(err)
		}
	}
	wal, err := os.ReadFile(otherPath + "-wal")
	if err != nil || len(wal) == 0 {
		t.Fatalf("no log to leave behind: %v", err)
	}
	other.Close()
	if err := os.WriteFile(otherPath+"-wal", wal, 0o644); err != nil {
		t.Fatal(err)
	}
	before := dumpRows(t, otherPath)
	if err := os.WriteFile(otherPath+"-wal", wal, 0o644); err != nil { // dumpRows replayed it
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), backup, otherPath, RestoreOptions{}); !errors.Is(err, ErrStoreExists) {
		t.Errorf("restore onto a store without Replace: %v, want ErrStoreExists", err)
	}
	sameRows(t, "the store a refused restore left", dumpRows(t, otherPath), before)
	if err := os.WriteFile(otherPath+"-wal", wal, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), backup, otherPath, RestoreOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	sameRows(t, "restored over a store with a log", dumpRows(t, otherPath), want)
	if _, err := inspect(context.Background(), otherPath); err != nil {
		t.Error(err)
	}
}

// A restore over a store whose feed went further than the backup's moves
// the feed past the replaced store's newest event: ids are never reused,
// and a client whose position came from the replaced store (the backup's
// or later) must read the plants again, so it gets EGONE, not events that
// now mean other changes. A backup of an earlier schema (a row an event,
// or no feed at all) gets the same.
func TestRestoreCarriesTheFeedOn(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		backup func(t *testing.T, path string) string
	}{
		{"this schema", func(t *testing.T, path string) string { return mustBackup(t, path) }},
		{"schema 7", func(t *testing.T, _ string) string { return copyFixture(t, 7) }},
		// From before the feed: the ids the migration starts carry on too.
		{"schema 3", func(t *testing.T, _ string) string { return copyFixture(t, 3) }},
		{"schema 1", func(t *testing.T, _ string) string { return copyFixture(t, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, path := openTest(t, Options{})
			for i := range int64(5) {
				if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: i, Name: "before the backup"}); err != nil {
					t.Fatal(err)
				}
			}
			backup := tc.backup(t, path)
			backupLast, _, err := lastEventID(ctx, backup)
			if err != nil {
				t.Fatal(err)
			}
			for i := range int64(40) {
				if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1000 + i, Name: "after the backup"}); err != nil {
					t.Fatal(err)
				}
			}
			gone, err := db.LatestEventID(ctx)
			if err != nil || gone <= backupLast {
				t.Fatalf("the replaced store's newest event %d (%v), the backup's %d: want it later", gone, err, backupLast)
			}
			db.Close()
			info, err := Restore(ctx, backup, path, RestoreOptions{Replace: true})
			if err != nil {
				t.Fatal(err)
			}
			if info.FeedMovedPast != gone {
				t.Errorf("the restore says the feed moved past %d, want %d", info.FeedMovedPast, gone)
			}
			restored, err := Open(ctx, path, Options{SoleServer: true})
			if err != nil {
				t.Fatal(err)
			}
			defer restored.Close()
			for _, after := range []int64{backupLast, gone - 1, gone} {
				if _, err := restored.Events(ctx, plantstore.EventQuery{After: after, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EGONE {
					t.Errorf("events after %d (the backup's newest %d, the replaced store's %d): %v, want EGONE", after, backupLast, gone, err)
				}
			}
			latest, err := restored.LatestEventID(ctx)
			if err != nil || latest != gone+1 {
				t.Errorf("the restored store's latest event id: %d, %v; want %d, past the replaced store's", latest, err, gone+1)
			}
			// What restore prints: the id followers follow after (a lower
			// one would get 410).
			if info.FeedAfter != latest {
				t.Errorf("the restore says the feed goes on after %d; the restored store's newest is %d", info.FeedAfter, latest)
			}
			restoredAt := time.Now()
			time.Sleep(5 * time.Millisecond)
			if _, err := restored.CreatePlant(ctx, plantstore.Plant{ID: 5000, Name: "after the restore"}); err != nil {
				t.Fatal(err)
			}
			page, err := restored.Events(ctx, plantstore.EventQuery{After: latest, Limit: 10})
			if err != nil || len(page) != 1 || page[0].ID != gone+2 || page[0].Plant.ID != 5000 {
				t.Errorf("after the restore, following from %d: %+v, %v; want the create of plant 5000 as event %d", latest, page, err, gone+2)
			}
			if backupLast == 0 {
				return // a backup from before the feed holds no events to prune
			}
			// Pruning the backup's events never lowers the horizon the
			// restore set past them.
			if n, err := restored.PruneEvents(ctx, restoredAt); err != nil || n == 0 {
				t.Fatalf("pruning the backup's events: %d, %v", n, err)
			}
			if _, err := restored.Events(ctx, plantstore.EventQuery{After: gone, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EGONE {
				t.Errorf("after the pruning, events after %d: %v, want EGONE", gone, err)
			}
		})
	}
}

// A second restore over a copy from before the feed, left unmigrated,
// carries on the horizon the first one carried: the documented rollback
// restores a schema 1 backup, and may restore another before serving.
func TestRestoreTwiceFromBeforeTheFeed(t *testing.T) {
	ctx := context.Background()
	db, path := openTest(t, Options{})
	for i := range int64(20) {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: i, Name: "given"}); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := db.LatestEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, v := range []int{3, 1} {
		if _, err := Restore(ctx, copyFixture(t, v), path, RestoreOptions{Replace: true}); err != nil {
			t.Fatalf("restore the schema %d backup: %v", v, err)
		}
	}
	restored, err := Open(ctx, path, Options{SoleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	if latest, err := restored.LatestEventID(ctx); err != nil || latest != gone+1 {
		t.Errorf("after two restores from before the feed: latest event id %d, %v; want %d, past the %d the first store gave", latest, err, gone+1, gone)
	}
	if _, err := restored.Events(ctx, plantstore.EventQuery{After: 1, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EGONE {
		t.Errorf("events after 1: %v, want EGONE", err)
	}
}

// Nothing at the target changes when the backup is unusable.
func TestRestoreRefusesBadBackups(t *testing.T) {
	db, path := openTest(t, Options{})
	fillForBackup(t, db)
	good := mustBackup(t, path)
	dir := t.TempDir()

	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, bytes.Repeat([]byte("not a database "), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(dir, "damaged")
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for i := 4096 + 100; i < len(b)-4096; i++ { // past the header, into every page but the last
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(dir, "newer")
	b, _ = os.ReadFile(good)
	if err := os.WriteFile(newer, b, 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", "file:"+newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, '0099_future.sql', 0)`, knownVersion(t)+1); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	// Every page readable, but an index disagrees with its table: only
	// the integrity check finds it.
	badIndex := filepath.Join(dir, "bad-index")
	b, _ = os.ReadFile(good)
	if err := os.WriteFile(badIndex, b, 0o600); err != nil {
		t.Fatal(err)
	}
	raw, _ = sql.Open("sqlite", "file:"+badIndex)
	raw.SetMaxOpenConns(1)
	for _, q := range []string{
		`PRAGMA writable_schema = ON`,
		`UPDATE sqlite_schema SET sql = 'CREATE INDEX plants_by_tag ON plants (name, id)' WHERE name = 'plants_by_tag'`,
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	raw.Close()
	notPlantstore := filepath.Join(dir, "other.sqlite")
	raw, _ = sql.Open("sqlite", "file:"+notPlantstore)
	if _, err := raw.Exec(`CREATE TABLE notes (body TEXT)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	for _, c := range []struct{ name, from, want string }{
		{"garbage", garbage, "not a usable backup"},
		{"damaged", damaged, "not a usable backup"},
		{"an index unlike its table", badIndex, "integrity check failed"},
		{"newer schema", newer, "newer than this plantstore knows"},
		{"not a plantstore store", notPlantstore, "not a plantstore store"},
		{"missing", filepath.Join(dir, "missing"), "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			to := filepath.Join(t.TempDir(), "restored.db")
			_, err := Restore(context.Background(), c.from, to, RestoreOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("restore: %v, want an error saying %q", err, c.want)
			}
			t.Log(err)
			for _, name := range apitest.DirNames(t, filepath.Dir(to)) {
				t.Errorf("a refused restore left %s", name)
			}
			// Over an existing store, with Replace: it is left as it was.
			before := dumpRows(t, path)
			if _, err := Restore(context.Background(), c.from, path, RestoreOptions{Replace: true}); err == nil {
				t.Error("restore with Replace succeeded")
			}
			sameRows(t, "the store a refused restore left", dumpRows(t, path), before)
		})
	}
}

// A store a server holds is never replaced, and a live store's main file
// is not taken for a backup.
func TestRestoreRefusesAServedStore(t *testing.T) {
	served, path := openTest(t, Options{SoleServer: true})
	fillForBackup(t, served)
	before := dumpRows(t, path)
	backup := mustBackup(t, path)
	_, err := Restore(context.Background(), backup, path, RestoreOptions{Replace: true})
	if err == nil || !strings.Contains(err.Error(), "another plantstore serve") || !strings.Contains(err.Error(), "stop the server first") {
		t.Errorf("restore onto a served store: %v, want a refusal", err)
	}
	sameRows(t, "the served store", dumpRows(t, path), before)
	if _, err := served.CreatePlant(context.Background(), plantstore.Plant{ID: 1000, Name: "after"}); err != nil {
		t.Errorf("the server after a refused restore: %v", err)
	}

	to := filepath.Join(t.TempDir(), "restored.db")
	if _, err := Restore(context.Background(), path, to, RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "-wal exists") {
		t.Errorf("restore from a live store: %v, want a refusal", err)
	}
}

// The command line passes paths as given, ./plantstore.db by default.
func TestBackupAndRestoreRelativePaths(t *testing.T) {
	t.Chdir(t.TempDir())
	db, err := Open(context.Background(), "plantstore.db", Options{})
	if err != nil {
		t.Fatal(err)
	}
	fillForBackup(t, db)
	db.Close()
	if _, err := Backup(context.Background(), "./plantstore.db", "backup.db", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir("restored", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), "backup.db", "restored/plantstore.db", RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), "backup.db", "./plantstore.db", RestoreOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	sameRows(t, "restored", dumpRows(t, "restored/plantstore.db"), dumpRows(t, "backup.db"))
}

// A restore through a symbolic link replaces the file the link names (and
// is refused while a server holds that file); it never replaces what is
// not a store, even with Replace: a file that is not SQLite, another
// program's database, a directory.
func TestRestoreReplacesOnlyAStore(t *testing.T) {
	ctx := context.Background()
	db, path := openTest(t, Options{})
	fillForBackup(t, db)
	backup := mustBackup(t, path)
	want := dumpRows(t, backup)
	db.Close()

	dir := t.TempDir()
	store := filepath.Join(dir, "store.db")
	served, err := Open(ctx, store, Options{SoleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(store, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, backup, link, RestoreOptions{Replace: true}); err == nil || !strings.Contains(err.Error(), "another plantstore serve") {
		t.Errorf("restore through a link to a served store: %v, want a refusal", err)
	}
	served.Close()
	if _, err := Restore(ctx, backup, link, RestoreOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link after a restore through it: %v, %v; want it still a link", fi, err)
	}
	sameRows(t, "the store restored through a link", dumpRows(t, store), want)

	// An empty file is no backup either.
	emptyBackup := filepath.Join(t.TempDir(), "empty-backup.db")
	if err := os.WriteFile(emptyBackup, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, emptyBackup, filepath.Join(dir, "new.db"), RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "the file is empty, not a backup") {
		t.Errorf("restore from an empty file: %v", err)
	}

	// An empty file is no store: restored over without Replace.
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, backup, empty, RestoreOptions{}); err != nil {
		t.Fatalf("restore over an empty file: %v", err)
	}
	sameRows(t, "the store restored over an empty file", dumpRows(t, empty), want)

	// A store with a second name (a hard link) is refused, as every
	// command refuses it: the restore would leave the old store under
	// the other name.
	other := filepath.Join(dir, "other-name.db")
	if err := os.Link(store, other); err == nil {
		if _, err := Restore(ctx, backup, store, RestoreOptions{Replace: true}); err == nil || !strings.Contains(err.Error(), "2 hard links") {
			t.Errorf("restore over a store with a hard link: %v, want a refusal", err)
		}
		if a, err1 := os.Stat(store); err1 == nil {
			if b, err2 := os.Stat(other); err2 != nil || !os.SameFile(a, b) {
				t.Errorf("the two names after a refused restore are no longer one file: %v", err2)
			}
		}
		os.Remove(other)
	} else {
		t.Log("no hard links here:", err)
	}

	text, foreign := filesOfOthers(t, dir)
	textBefore, err := os.ReadFile(text)
	if err != nil {
		t.Fatal(err)
	}
	foreignBefore, err := os.ReadFile(foreign)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ to, want string }{
		{text, "not a SQLite database"},
		{foreign, "of something else"},
		{dir, "is a directory"},
	} {
		if _, err := Restore(ctx, backup, c.to, RestoreOptions{Replace: true}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("restore onto %s with Replace: %v, want %q", c.to, err, c.want)
		}
	}
	if got, err := os.ReadFile(text); err != nil || string(got) != string(textBefore) {
		t.Errorf("the text file after a refused restore: %q, %v", got, err)
	}
	if got, err := os.ReadFile(foreign); err != nil || string(got) != string(foreignBefore) {
		t.Errorf("the other program's database changed: %v", err)
	}
}

// A restore over a store whose change feed cannot be read (a damaged one,
// the usual reason to restore) does not pass it over: the newest event id
// it gave is unknown, and the restored feed would give its ids again, to
// other changes, which a follower would take for the ones it saw. It
// fails, changing nothing, unless FeedAfter says where the feed goes on;
// FeedAfter carries the feed past an id into a new place too (the store
// replaced lost).
func TestRestoreOverAnUnreadableFeed(t *testing.T) {
	ctx := context.Background()
	db, path := openTest(t, Options{})
	for i := range int64(3) {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: i, Name: "before the backup"}); err != nil {
			t.Fatal(err)
		}
	}
	backup := mustBackup(t, path)
	for i := range int64(30) {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1000 + i, Name: "after the backup"}); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	// Damage past the header: the file is still a SQLite database by its
	// first page, but no table can be read.
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, 64<<10), 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	damaged, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, backup, path, RestoreOptions{Replace: true}); !errors.Is(err, ErrFeedUnknown) || !strings.Contains(err.Error(), "--feed-after") {
		t.Fatalf("restore over a damaged store: %v, want ErrFeedUnknown naming --feed-after", err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, damaged) {
		t.Fatal("the refused restore changed the store")
	}
	feedAfter := int64(33)
	info, err := Restore(ctx, backup, path, RestoreOptions{Replace: true, FeedAfter: &feedAfter})
	if err != nil {
		t.Fatal(err)
	}
	if info.FeedMovedPast != 33 || info.FeedAfter != 34 {
		t.Errorf("the restore says the feed moved past %d and goes on after %d; want 33 and 34", info.FeedMovedPast, info.FeedAfter)
	}
	restored, err := Open(ctx, path, Options{SoleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := restored.Events(ctx, plantstore.EventQuery{After: 30, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EGONE {
		t.Errorf("events after 30, an id the damaged store gave: %v, want EGONE", err)
	}
	if _, err := restored.CreatePlant(ctx, plantstore.Plant{ID: 77, Name: "after the restore"}); err != nil {
		t.Fatal(err)
	}
	if page, err := restored.Events(ctx, plantstore.EventQuery{After: 34, Limit: 10}); err != nil || len(page) != 1 || page[0].ID != 35 {
		t.Errorf("after the restore, following from 34: %+v, %v; want the create as event 35", page, err)
	}
	restored.Close()

	// Into a new place, with the store replaced lost: FeedAfter alone.
	elsewhere := filepath.Join(t.TempDir(), "new.db")
	info, err = Restore(ctx, backup, elsewhere, RestoreOptions{FeedAfter: &feedAfter})
	if err != nil || info.FeedAfter != 34 {
		t.Errorf("restore into a new place with FeedAfter 33: goes on after %d, %v; want 34", info.FeedAfter, err)
	}
	// Without it, the backup's own newest.
	plain := filepath.Join(t.TempDir(), "plain.db")
	info, err = Restore(ctx, backup, plain, RestoreOptions{})
	if err != nil || info.FeedAfter != 3 || info.FeedMovedPast != 0 {
		t.Errorf("restore into a new place: goes on after %d (moved past %d), %v; want 3, not moved", info.FeedAfter, info.FeedMovedPast, err)
	}
}

// A restore or a backup interrupted while it checks its copy says so,
// rather than blaming a good backup (an operator could throw it away),
// and leaves nothing.
func TestInterruptedCheckBlamesNoBackup(t *testing.T) {
	db, path := openTest(t, Options{})
	fillForBackup(t, db)
	backup := mustBackup(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	to := filepath.Join(t.TempDir(), "restored.db")
	_, err := Restore(ctx, backup, to, RestoreOptions{})
	if err == nil || strings.Contains(err.Error(), "not a usable backup") || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("a restore interrupted: %v; want it told as interrupted, not the backup's fault", err)
	}
	if _, err := os.Stat(to); !os.IsNotExist(err) {
		t.Errorf("an interrupted restore left %s: %v", to, err)
	}
	_, err = Backup(ctx, path, filepath.Join(t.TempDir(), "b.db"), time.Second)
	if err == nil || strings.Contains(err.Error(), "failed its check") {
		t.Errorf("a backup interrupted: %v; want it told as interrupted", err)
	}
}
