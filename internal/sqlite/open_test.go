package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
