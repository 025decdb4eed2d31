//go:build unix

package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

// withUmask runs the test under the usual umask, 022, which leaves files
// created 0644 readable by everyone unless created otherwise.
func withUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

// Every file of a new store is 0600: the main file, the -wal and -shm
// SQLite makes beside it (with the main file's mode), the lock file, and
// a backup; whether serve or a command-line tool created the store.
func TestStoreFilesAre0600(t *testing.T) {
	withUmask(t)
	ctx := context.Background()
	for _, sole := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "plants.db")
		db, err := Open(ctx, path, Options{SoleServer: sole})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "fern"}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.AddSubscriber(ctx, "https://hooks.example.com/x", "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0cw=="); err != nil {
			t.Fatal(err)
		}
		files := []string{path, path + "-wal", path + "-shm"}
		if sole {
			files = append(files, path+".lock")
		}
		for _, f := range files {
			if m := mode(t, f); m.Perm() != 0o600 || !m.IsRegular() {
				t.Errorf("SoleServer=%t: %s is %v, want -rw-------", sole, filepath.Base(f), m)
			}
		}
		if got := Warnings(path); got != nil {
			t.Errorf("Warnings on a new store: %q", got)
		}
		backup := filepath.Join(filepath.Dir(path), "backup.db")
		if _, err := Backup(ctx, path, backup, time.Second); err != nil {
			t.Fatal(err)
		}
		if m := mode(t, backup); m.Perm() != 0o600 {
			t.Errorf("the backup is %v, want -rw-------", m)
		}
		db.Close()
	}
}

// An existing store open to other users still opens, and Warnings names
// each of its files that is, until they are closed with chmod.
func TestWarningsOnReadableStore(t *testing.T) {
	withUmask(t)
	db, path := openTest(t, Options{SoleServer: true})
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "fern"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + "-wal"} {
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := Warnings(path)
	if len(got) != 1 || !strings.Contains(got[0], path+" (0644)") || !strings.Contains(got[0], path+"-wal (0644)") ||
		strings.Contains(got[0], "-shm") || !strings.Contains(got[0], "chmod 600") {
		t.Errorf("Warnings = %q, want the main file and the -wal named, with the fix", got)
	}
	db.Close()
	// An old store made 0644 keeps working.
	again, err := Open(context.Background(), path, Options{SoleServer: true})
	if err != nil {
		t.Fatalf("reopening a 0644 store: %v", err)
	}
	again.Close()
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		os.Chmod(f, 0o600) // a missing -wal or -shm is fine
	}
	if got := Warnings(path); got != nil {
		t.Errorf("Warnings after chmod 600: %q", got)
	}
	if got := Warnings(filepath.Join(t.TempDir(), "none.db")); got != nil {
		t.Errorf("Warnings on no store: %q", got)
	}
}

// A symbolic link planted where the lock file goes, or where SQLite
// creates its log, is refused, and its target is neither created nor
// touched; so is a store path that links to nothing.
func TestPlantedSymlinksRefused(t *testing.T) {
	withUmask(t)
	elsewhere := t.TempDir()
	for _, tc := range []struct {
		name   string // the link, beside the store
		opts   Options
		target string
		exists bool // whether the target exists before
		want   string
	}{
		{".lock", Options{SoleServer: true}, "created-by-plantstore", false, "symbolic link"},
		{".lock", Options{SoleServer: true}, "victim", true, "symbolic link"},
		{"-wal", Options{}, "wal-target", false, "symbolic link"},
		{"-shm", Options{SoleServer: true}, "shm-target", true, "symbolic link"},
		{"", Options{}, "dangling-store", false, "does not exist"},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, "plants.db")
		target := filepath.Join(elsewhere, tc.target)
		if tc.exists {
			if err := os.WriteFile(target, []byte("keep me"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(target, path+tc.name); err != nil {
			t.Fatal(err)
		}
		db, err := Open(context.Background(), path, tc.opts)
		if err == nil {
			db.Close()
			t.Errorf("%s linked to %s: Open succeeded", tc.name, tc.target)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s linked: Open = %v, want it to say %q", tc.name, err, tc.want)
		}
		b, statErr := os.ReadFile(target)
		switch {
		case tc.exists && (statErr != nil || string(b) != "keep me"):
			t.Errorf("%s linked: the target was changed: %q, %v", tc.name, b, statErr)
		case !tc.exists && statErr == nil:
			t.Errorf("%s linked: Open created the target %s", tc.name, target)
		}
		if tc.exists {
			if m := mode(t, target); m.Perm() != 0o644 {
				t.Errorf("%s linked: the target's mode changed to %v", tc.name, m)
			}
		}
	}
	// Restore takes the same lock, through the same refusal.
	dir := t.TempDir()
	path := filepath.Join(dir, "plants.db")
	if err := os.Symlink(filepath.Join(elsewhere, "restore-target"), path+".lock"); err != nil {
		t.Fatal(err)
	}
	// The backup must exist: Restore looks at it first.
	backup := filepath.Join(dir, "backup.db")
	if err := os.WriteFile(backup, []byte("not read: the lock is refused first"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), backup, path, RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Restore beside a planted lock link: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(elsewhere, "restore-target")); err == nil {
		t.Error("Restore created the lock link's target")
	}
}

// A store that is a link to an existing file is the operator's choice and
// opens; its log is kept, 0600, beside the target.
func TestStoreLinkToExistingFileOpens(t *testing.T) {
	withUmask(t)
	real := filepath.Join(t.TempDir(), "real.db")
	db, err := Open(context.Background(), real, Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	link := filepath.Join(t.TempDir(), "plants.db")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	db, err = Open(context.Background(), link, Options{SoleServer: true})
	if err != nil {
		t.Fatalf("a store linked to an existing file: %v", err)
	}
	defer db.Close()
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "fern"}); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, real+"-wal"); m.Perm() != 0o600 {
		t.Errorf("the target's -wal is %v", m)
	}
}
