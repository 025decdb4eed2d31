package flush

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func tempFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// On Linux the Syncer must take the asynchronous path: were it to fall
// back to fsync silently, the writer would hold a P through every flush
// again, and only the benchmarks would tell.
func TestSyncIsAsynchronousOnLinux(t *testing.T) {
	s := New(tempFile(t))
	defer s.Close()
	if runtime.GOOS == "linux" && s.async == nil {
		t.Fatal("the kernel refused native AIO fdatasync; Sync falls back to fsync")
	}
}

func TestSyncSavesWhatWasWritten(t *testing.T) {
	f := tempFile(t)
	s := New(f)
	defer s.Close()
	for i := range 100 {
		if _, err := f.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	got, err := os.ReadFile(f.Name())
	if err != nil || len(got) != 100 || got[99] != 99 {
		t.Fatalf("the file after 100 writes and syncs: %d bytes, %v", len(got), err)
	}
}

// A failed sync is reported, and the Syncer falls back to fsync, which
// reports failures too.
func TestSyncReportsFailure(t *testing.T) {
	f := tempFile(t)
	s := New(f)
	defer s.Close()
	// A descriptor the kernel cannot flush: a pipe's, in place of the
	// file's (the Syncer keeps the number).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if s.async != nil {
		s.async.fd = int(r.Fd())
	} else {
		s.f = r
	}
	if err := s.Sync(); err == nil {
		t.Fatal("a sync of a pipe succeeded")
	}
	if s.async != nil {
		t.Error("the Syncer still uses AIO after a failure")
	}
	s.f = f
	if err := s.Sync(); err != nil {
		t.Errorf("fsync of the file after the failure: %v", err)
	}
	f.Close()
	if err := s.Sync(); err == nil {
		t.Error("fsync of the closed file succeeded")
	}
}
