//go:build unix

package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

// lockHeldAtName says whether another process, or another DB of this
// one, holds the lock of the store at path, as a second server would
// find it: it tries to take it, and lets it go at once.
func lockHeldAtName(path string) bool {
	f, _, err := lockSoleServer(path)
	if err == nil {
		f.Close()
	}
	return errors.Is(err, errLockHeld)
}

// A lock file removed by the process that made it (a refused Open or
// Restore) while another had it open is not a lock: that other process
// takes the lock again, on the file at the name, and a third is refused.
func TestSoleLockNotHeldOnARemovedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plants.db")
	a, created, err := lockSoleServer(path)
	if err != nil || !created {
		t.Fatalf("first lock: created %v, %v", created, err)
	}
	// B opens the file A made; before B locks it, A removes it and lets go.
	var once sync.Once
	beforeFlock = func() {
		once.Do(func() {
			os.Remove(a.Name())
			a.Close()
		})
	}
	t.Cleanup(func() { beforeFlock = nil })
	b, _, err := lockSoleServer(path)
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	defer b.Close()
	if !lockedAtName(b, path+".lock") {
		t.Fatal("B holds a lock on a file no longer at the name")
	}
	if c, _, err := lockSoleServer(path); err == nil {
		c.Close()
		t.Fatal("B and C both hold the sole-server lock")
	} else if !strings.Contains(err.Error(), "another plantstore serve") {
		t.Errorf("C: %v", err)
	}
}

// The same race with the real parts: a failing Restore, which makes the
// lock file and removes it, against a server taking the lock.
func TestSoleLockAgainstAFailingRestore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plants.db")
	for i := range 2000 {
		os.Remove(path + ".lock") // so that Restore makes it, and removes it
		var wg sync.WaitGroup
		var f *os.File
		var lerr error
		wg.Go(func() { Restore(context.Background(), filepath.Join(dir, "no-such-backup.db"), path, RestoreOptions{}) })
		wg.Go(func() { f, _, lerr = lockSoleServer(path) })
		wg.Wait()
		if lerr != nil {
			if !strings.Contains(lerr.Error(), "another plantstore serve") {
				t.Fatalf("round %d: %v", i, lerr)
			}
			continue
		}
		if !lockedAtName(f, path+".lock") {
			f.Close()
			t.Fatalf("round %d: the server holds a lock on a file no longer at the name", i)
		}
		f.Close()
	}
}

// A lock file replaced every time it is about to be locked is given up on
// after a bounded number of tries, with an error naming the file, and the
// file locked last is not left held.
func TestSoleLockGivesUpOnAFileKeptReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plants.db")
	name := path + ".lock"
	var opened []*os.File
	tries := 0
	beforeFlock = func() {
		tries++
		// Another process replaces the file between the open and the lock.
		os.Remove(name)
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Errorf("replace the lock file: %v", err)
			return
		}
		opened = append(opened, f)
	}
	t.Cleanup(func() {
		beforeFlock = nil
		for _, f := range opened {
			f.Close()
		}
	})
	f, _, err := lockSoleServer(path)
	if err == nil {
		f.Close()
		t.Fatal("locked a file that is never the one at the name")
	}
	if !strings.Contains(err.Error(), "keeps being replaced") || !strings.Contains(err.Error(), name) {
		t.Errorf("error = %q, want it to say %s keeps being replaced", err, name)
	}
	if tries != 10 {
		t.Errorf("%d tries, want 10", tries)
	}
	// Nothing of ours holds a lock now: the file at the name can be locked.
	beforeFlock = nil
	g, _, err := lockSoleServer(path)
	if err != nil {
		t.Fatalf("lock after giving up: %v", err)
	}
	g.Close()
}

// A server's lock file removed by hand while it serves is made again,
// and locked: another server is still refused. One that another process
// made and locked first is a second server of the store: the first stops
// acknowledging writes, and says why once.
func TestSoleLockKeptWhenRemoved(t *testing.T) {
	db, path, logs := openWatched(t)
	name := path + ".lock"
	os.Remove(name)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "made it again") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !lockHeldAtName(path) {
		t.Fatalf("the lock file is not made again within 5 s of its removal; log:\n%s", logs)
	}
	if f, _, err := lockSoleServer(path); err == nil {
		f.Close()
		t.Fatal("a second server took the lock of a served store")
	} else if !strings.Contains(err.Error(), "another plantstore serve is using") {
		t.Errorf("a second server: %v", err)
	}
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 2, Name: "still served"}); err != nil {
		t.Fatalf("a create once the lock is back: %v", err)
	}

	// Removed, and the new file held a moment by another process (a
	// token command asking whether a server holds it, a refused
	// restore): not a second server. The store takes the lock once it is
	// let go, and goes on.
	for range 10 {
		os.Remove(name)
		if brief, _, err := lockSoleServer(path); err == nil {
			time.Sleep(filesCheckPeriod + filesCheckPeriod/2)
			brief.Close()
			break
		}
	}
	for deadline := time.Now().Add(5 * time.Second); !lockHeldAtName(path) && time.Now().Before(deadline); {
		time.Sleep(filesCheckPeriod)
	}
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 3, Name: "after a moment's holder"}); err != nil {
		t.Fatalf("a create once a brief holder let the lock go: %v", err)
	}
	if !lockHeldAtName(path) {
		t.Fatal("the store does not hold its lock again once a brief holder let it go")
	}

	// Removed, and taken by another process before the check: a plain
	// lock on a file at the name, as a second serve takes it.
	// The check runs every filesCheckPeriod: the race is won at once
	// nearly always.
	var second *os.File
	var err error
	for range 10 {
		os.Remove(name)
		if second, _, err = lockSoleServer(path); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("a second server never took the lock first: %v", err)
	}
	defer second.Close()
	_, err = createsUntilRefused(t, db)
	if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE || plantstore.ErrorMessage(err) != lockTaken {
		t.Errorf("a create beside a second server: %v (%q), want EUNAVAILABLE, %q", err, plantstore.ErrorMessage(err), lockTaken)
	}
	if err := db.Ping(context.Background()); plantstore.ErrorMessage(err) != lockTaken {
		t.Errorf("Ping (readiness) beside a second server: %v", err)
	}
	time.Sleep(3 * filesCheckPeriod)
	if n := strings.Count(logs.String(), lockTaken); n != 1 {
		t.Errorf("the second server is logged %d times, want once:\n%s", n, logs)
	}
}
