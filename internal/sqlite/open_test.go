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
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

// MustExist opens only a store that is there, and makes nothing when it
// is not; without it, Open makes one and says so through Created, once.
func TestOpenMustExist(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "plants.db")
	if _, err := Open(ctx, path, Options{MustExist: true}); !errors.Is(err, ErrNoStore) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open with MustExist on no store: %v; want ErrNoStore naming %s", err, path)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("Open with MustExist left %v", entries)
	}
	var created []string
	opts := Options{Created: func(p string) { created = append(created, p) }}
	db, err := Open(ctx, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if db, err = Open(ctx, path, opts); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if len(created) != 1 || created[0] != path {
		t.Errorf("Created heard %q; want the new store's path, once", created)
	}
	if db, err = Open(ctx, path, Options{MustExist: true}); err != nil {
		t.Fatalf("Open with MustExist on a store: %v", err)
	}
	db.Close()
}

// An empty file (made with touch, say) is no store: MustExist refuses it
// and leaves it empty; without MustExist, Open makes the store in it and
// says so, as it does where no file is.
func TestOpenEmptyFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "plants.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, path, Options{MustExist: true}); !errors.Is(err, ErrNoStore) || !strings.Contains(err.Error(), "the file there is empty") {
		t.Fatalf("Open with MustExist on an empty file: %v; want ErrNoStore saying it is empty", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the empty file after a refusal: %v, %v; want it left empty", fi, err)
	}
	var created []string
	db, err := Open(ctx, path, Options{Created: func(p string) { created = append(created, p) }})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if len(created) != 1 || created[0] != path {
		t.Errorf("Created heard %q; want the store made in the empty file", created)
	}
	if fi, err := os.Stat(path); err != nil || runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("the store made in an empty file: %v, %v; want it 0600", fi.Mode(), err)
	}
	if db, err = Open(ctx, path, Options{MustExist: true}); err != nil {
		t.Fatalf("Open with MustExist on the store made there: %v", err)
	}
	db.Close()
}

// A store in a missing directory fails at once, naming it, without the
// busy timeout's wait.
func TestOpenMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone", "plants.db")
	start := time.Now()
	_, err := Open(context.Background(), path, Options{BusyTimeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "is in a directory that does not exist ("+filepath.Dir(path)+")") {
		t.Errorf("Open in a missing directory: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Open in a missing directory took %v", took)
	}
}

// A --db that names some other file is refused, naming what it is, and
// the file is left exactly as it was: a file that is not SQLite, and a
// SQLite database of another program, whose tables plantstore would
// otherwise have added its own to.
// A rollback by hand that stopped part-way leaves versions missing below
// the highest: Open says so rather than start on tables that are gone.
func TestOpenRefusesAnIncompleteSchema(t *testing.T) {
	db, path := openTest(t, Options{})
	db.Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`DELETE FROM schema_migrations WHERE version IN (3, 4)`); err != nil {
		t.Fatal(err)
	}
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), path, Options{})
	want := "database schema is incomplete: schema_migrations records versions 1, 2"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("not all of 1 to %d", len(ms))) {
		t.Fatalf("Open on an incomplete schema: %v, want an error saying %q", err, want)
	}
}

func TestOpenRefusesFilesOfOthers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	text, other := filesOfOthers(t, dir)
	before := map[string][]byte{}
	for _, p := range []string{text, other} {
		before[p], _ = os.ReadFile(p)
	}
	for path, want := range map[string]string{
		text:  "is not a SQLite database",
		other: "is a SQLite database of something else (its tables: customers)",
	} {
		db, err := Open(ctx, path, Options{})
		if err == nil {
			db.Close()
			t.Fatalf("Open %s succeeded", path)
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("Open %s: %v; want %q and the path", path, err, want)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(after, before[path]) {
			t.Errorf("Open %s changed the file", path)
		}
	}
	// As a sole server: the lock file it made goes with the refusal; one
	// that was there before stays.
	if db, err := Open(ctx, other, Options{SoleServer: true}); err == nil {
		db.Close()
		t.Fatalf("Open %s as the sole server succeeded", other)
	}
	if _, err := os.Lstat(other + ".lock"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused Open left %s.lock: %v", other, err)
	}
	if err := os.WriteFile(text+".lock", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if db, err := Open(ctx, text, Options{SoleServer: true}); err == nil {
		db.Close()
		t.Fatalf("Open %s as the sole server succeeded", text)
	}
	if _, err := os.Lstat(text + ".lock"); err != nil {
		t.Errorf("a refused Open removed a lock file it did not make: %v", err)
	}
	// An empty file is a new store's start, as a missing one is.
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := Open(ctx, empty, Options{})
	if err != nil {
		t.Fatalf("Open an empty file: %v", err)
	}
	db.Close()
}

// filesOfOthers makes in dir two files that are not stores: a text file,
// and another program's SQLite database (its table: customers).
func filesOfOthers(t *testing.T, dir string) (text, other string) {
	t.Helper()
	text = filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("not a database\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other = filepath.Join(dir, "other.db")
	odb, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	defer odb.Close()
	if _, err := odb.Exec(`CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO customers VALUES (1, 'Ada')`); err != nil {
		t.Fatal(err)
	}
	return text, other
}

// A store's log without its file (left by a server killed after its file
// was deleted) is never passed over: Open, where it would make a new
// store, refuses, and makes nothing; Restore refuses unless told to
// replace.
func TestNoNewStoreBesideLeftovers(t *testing.T) {
	ctx := context.Background()
	for _, left := range [][]string{{"-wal", "-shm"}, {"-wal"}, {"-shm"}} {
		dir := t.TempDir()
		path := filepath.Join(dir, "plants.db")
		for _, suffix := range left {
			if err := os.WriteFile(path+suffix, []byte("what a killed server left"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		db, err := Open(ctx, path, Options{SoleServer: true})
		if err == nil {
			db.Close()
			t.Fatalf("%v left: Open made a new store", left)
		}
		if !errors.Is(err, ErrLeftovers) || !strings.Contains(err.Error(), path+left[0]) || !strings.Contains(err.Error(), "acknowledged writes") {
			t.Errorf("%v left: %v; want ErrLeftovers naming %s", left, err, path+left[0])
		}
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v left: the refused Open made %s: %v", left, path, err)
		}
		for _, suffix := range left {
			if b, err := os.ReadFile(path + suffix); err != nil || string(b) != "what a killed server left" {
				t.Errorf("%v left: %s after the refusal: %q, %v", left, suffix, b, err)
			}
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != len(left) {
			t.Errorf("%v left: %d files in the directory after the refusal, want %d", left, len(entries), len(left))
		}
		// A command that needs a store says there is none, as before.
		if _, err := Open(ctx, path, Options{MustExist: true}); !errors.Is(err, ErrNoStore) {
			t.Errorf("%v left: Open with MustExist: %v, want ErrNoStore", left, err)
		}
	}

	// Restore: refused without Replace, done with it (the leftovers go).
	src, srcPath := openTest(t, Options{})
	if _, err := src.CreatePlant(ctx, plantstore.Plant{ID: 7, Name: "backed up"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	backup := filepath.Join(dir, "backup.db")
	if _, err := Backup(ctx, srcPath, backup, time.Second); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "plants.db")
	if err := os.WriteFile(path+"-wal", []byte("left"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, backup, path, RestoreOptions{}); !errors.Is(err, ErrLeftovers) {
		t.Fatalf("restore beside leftovers: %v, want ErrLeftovers", err)
	}
	if _, err := Restore(ctx, backup, path, RestoreOptions{Replace: true}); err != nil {
		t.Fatalf("restore --force beside leftovers: %v", err)
	}
	db, err := Open(ctx, path, Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if p, err := db.GetPlant(ctx, 7); err != nil || p.Name != "backed up" {
		t.Errorf("the restored store's plant 7: %v, %v", p, err)
	}
}
