//go:build unix

package sqlite

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
)

// openWatched opens a store as serve does, its background log in logs.
func openWatched(t *testing.T) (*DB, string, *apitest.Buffer) {
	t.Helper()
	logs := &apitest.Buffer{}
	db, path := openTest(t, Options{SoleServer: true, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "before"}); err != nil {
		t.Fatal(err)
	}
	return db, path, logs
}

// createsUntilRefused creates plants until one is refused, for 5 s at
// most (the background check runs every filesCheckPeriod), and returns
// the refusal and how many were acknowledged first.
func createsUntilRefused(t *testing.T, db *DB) (acked int, err error) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for id := int64(1000); time.Now().Before(deadline); id++ {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "after"}); err != nil {
			return acked, err
		}
		acked++
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d creates acknowledged for 5 s after the store's file went: none refused", acked)
	return acked, nil
}

// wantStopped checks that the store refuses writes and Ping with the
// message of a swapped file, and that it said so once in its log.
func wantStopped(t *testing.T, db *DB, logs *apitest.Buffer) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 2, Name: "later"}); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE || plantstore.ErrorMessage(err) != filesGone {
		t.Errorf("a create: %v (%q); want EUNAVAILABLE, %q", err, plantstore.ErrorMessage(err), filesGone)
	}
	if err := db.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: "changed"}, nil); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Errorf("an update: %v, want EUNAVAILABLE", err)
	}
	if err := db.Ping(ctx); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE || plantstore.ErrorMessage(err) != filesGone {
		t.Errorf("Ping: %v, want EUNAVAILABLE, %q", err, filesGone)
	}
	time.Sleep(2 * filesCheckPeriod) // the check goes on? It must not log again.
	if n := strings.Count(logs.String(), `"level":"ERROR","msg":"`+filesGone+`"`); n != 1 {
		t.Errorf("%d ERROR lines saying so, want 1; the log:\n%s", n, logs)
	}
}

// The store's file deleted under a running store: writes stop being
// acknowledged within a few checks, and Ping fails. Before, every write
// went on answering 200 into a file no name reached.
func TestDeletedFileStopsAcknowledging(t *testing.T) {
	db, path, logs := openWatched(t)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	acked, err := createsUntilRefused(t, db)
	if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Fatalf("the refusal: %v, want EUNAVAILABLE", err)
	}
	t.Logf("%d creates acknowledged before the deletion was found", acked)
	wantStopped(t, db, logs)
}

// The store's file replaced (mv backup.db PATH) under a running store:
// the same.
func TestReplacedFileStopsAcknowledging(t *testing.T) {
	db, path, logs := openWatched(t)
	other := filepath.Join(filepath.Dir(path), "backup.db")
	if _, err := Backup(context.Background(), path, other, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if _, err := createsUntilRefused(t, db); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Fatalf("the refusal: %v, want EUNAVAILABLE", err)
	}
	wantStopped(t, db, logs)
}

// The log deleted under a running store: the writes in it would be lost
// at the next crash. Ping finds it at once, without waiting for the
// background check.
func TestDeletedLogFailsPingAtOnce(t *testing.T) {
	db, path, logs := openWatched(t)
	if err := os.Remove(path + "-wal"); err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(context.Background()); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Fatalf("Ping right after the log was deleted: %v, want EUNAVAILABLE", err)
	}
	wantStopped(t, db, logs)
}

// What SQLite itself does to its log while the store is open never makes
// it another file: checkpoints (which restart the log from its start),
// truncating checkpoints, journal_size_limit, and another process's
// connections opening and closing (the token commands). Were it
// otherwise, the store would stop on its own. Nor does Close count as a
// fault, though SQLite removes the log then.
func TestFilesCheckedIgnoreSQLitesOwnLog(t *testing.T) {
	db, path, logs := openWatched(t)
	ctx := context.Background()
	walBefore, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 200)
	id := int64(100)
	createSome := func(n int) {
		t.Helper()
		for range n {
			id++
			if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: big}); err != nil {
				t.Fatal(err)
			}
		}
	}
	createSome(2000) // past an automatic checkpoint (1,000 pages)
	for _, stmt := range []string{
		`PRAGMA wal_checkpoint(TRUNCATE)`,
		`PRAGMA journal_size_limit = 0`,
		`PRAGMA wal_checkpoint(RESTART)`,
		`PRAGMA wal_checkpoint(TRUNCATE)`,
	} {
		if _, err := db.write.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		createSome(50)
	}
	// A command-line process's store, opened and closed beside the server.
	for range 3 {
		cli, err := Open(ctx, path, Options{MustExist: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.CreateToken(ctx, plantstore.Token{Name: "cli" + time.Now().Format("150405.000000000"), Scopes: []string{plantstore.ScopePlantsRead}}, plantstore.HashToken(plantstore.NewToken())); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.write.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			t.Fatal(err)
		}
		if err := cli.Close(); err != nil {
			t.Fatal(err)
		}
		createSome(10)
	}
	walAfter, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(walBefore, walAfter) {
		t.Fatal("SQLite made its log anew while the store was open")
	}
	time.Sleep(2 * filesCheckPeriod)
	if err := db.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	createSome(1)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "ERROR") {
		t.Errorf("the store logged an error:\n%s", logs)
	}
}

// A name that cannot be looked up for a moment (a directory's permission
// taken away, an I/O error) says nothing of the file: the store goes on,
// and stops only for a file gone or another file at the name.
func TestFilesCheckPassesOverALookupThatFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plants.db")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	of := captureFiles(path)
	if !of.watched() {
		t.Skip("no inode numbers here")
	}
	was := statFile
	t.Cleanup(func() { statFile = was })
	statFile = func(string) (os.FileInfo, error) {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: syscall.EACCES}
	}
	if err := of.check(); err != nil {
		t.Errorf("a lookup refused for permission: %v, want no difference found", err)
	}
	statFile = func(string) (os.FileInfo, error) {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: syscall.ENOENT}
	}
	if err := of.check(); err == nil {
		t.Error("a file gone: no difference found")
	}
}

// A store moved away just before Close, sooner than the background check
// comes round, still gets its log: Close looks once more.
func TestCloseFoldsTheLogOfAFileMovedJustBefore(t *testing.T) {
	db, path, _ := openWatched(t)
	ctx := context.Background()
	for id := int64(2); id <= 50; id++ {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: "kept"}); err != nil {
			t.Fatal(err)
		}
	}
	moved := filepath.Join(filepath.Dir(path), "moved.db")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The moved file alone, without the log left at the old name.
	alone := filepath.Join(t.TempDir(), "alone.db")
	data, err := os.ReadFile(moved)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := Open(ctx, alone, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for id := int64(1); id <= 50; id++ {
		if _, err := again.GetPlant(ctx, id); err != nil {
			t.Fatalf("plant %d, created before the move, in the moved file alone: %v", id, err)
		}
	}
}
