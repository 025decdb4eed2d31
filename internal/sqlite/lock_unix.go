//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// lockSoleServer takes an exclusive lock on path+".lock", held until the
// returned file is closed or the process ends (a SIGKILL included). The
// file is created 0600 and never through a symbolic link: a link planted
// there would make plantstore create or open its target, anywhere the
// process may write. created says whether this call made the file, so
// that a store that fails to open does not leave it behind.
//
// Since such a file may be removed, the lock taken must be on the file
// still at that name: another process may have opened it just before it
// was removed, and would otherwise hold a lock on a file no one else can
// find. So after taking the lock, the file is compared with the one at
// the name, and on a difference the lock is let go and taken again.
func lockSoleServer(path string) (f *os.File, created bool, err error) {
	name := path + ".lock"
	for attempt := 1; ; attempt++ {
		f, created, err = lockFile(path)
		if err == nil && lockedAtName(f, name) {
			return f, created, nil
		}
		if err == nil {
			f.Close()
		} else if !errors.Is(err, errLockGone) {
			return nil, false, err
		}
		if attempt == 10 {
			return nil, false, fmt.Errorf("lock %s: it keeps being replaced; is another process removing it?", name)
		}
	}
}

// errLockGone is lockFile's when the lock file it found was removed
// before it could open it: then it is made afresh.
var errLockGone = errors.New("the lock file was removed")

// beforeFlock, when set, runs between opening the lock file and locking
// it: tests use it to act in that gap.
var beforeFlock func()

// lockFile opens the lock file of the store at path, making it if there
// is none, and locks it.
func lockFile(path string) (*os.File, bool, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	created := err == nil
	if errors.Is(err, fs.ErrExist) {
		if f, err = os.OpenFile(name, os.O_RDWR|syscall.O_NOFOLLOW, 0); errors.Is(err, fs.ErrNotExist) {
			return nil, false, errLockGone
		}
	}
	if err != nil {
		// Linux says ELOOP, FreeBSD EMLINK: ask the file system instead.
		if fi, lerr := os.Lstat(name); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, false, fmt.Errorf("%s is a symbolic link; refusing to follow it, as a link planted there would make plantstore create or open its target (remove it)", name)
		}
		if _, lerr := os.Lstat(name); lerr == nil && errors.Is(err, fs.ErrPermission) {
			// There, and not this user's to write: not a directory's
			// permission, which the hint would not cure.
			return nil, false, fmt.Errorf("open the lock file %s: %w%s", name, unwrapPath(err), ownerHint(err, name, path))
		}
		return nil, false, fmt.Errorf("open the lock file %s: %w", name, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, false, fmt.Errorf("%s is not a regular file; refusing to use it as the lock file (remove it)", name)
	}
	if beforeFlock != nil {
		beforeFlock()
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, fmt.Errorf("%w %s: one server per SQLite file (run several against PostgreSQL)", errLockHeld, path)
		}
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	return f, created, nil
}

// lockedAtName says whether f is still the file at name.
func lockedAtName(f *os.File, name string) bool {
	held, err := f.Stat()
	if err != nil {
		return false
	}
	there, err := os.Lstat(name)
	return err == nil && os.SameFile(held, there)
}

// relock takes the lock of the store at path again when held, the lock
// file the store locked, is no longer the file at its name: removed (by
// hand, taken for one a crash left) or replaced. It returns the lock to
// hold from then on (held itself while it is still at the name, or when
// the name is being made again: a later check tells), and errLockHeld
// when another process locked the file now at the name: another server
// of the same store.
func relock(held *os.File, path string) (*os.File, error) {
	if lockedAtName(held, path+".lock") {
		return held, nil
	}
	f, _, err := lockFile(path)
	switch {
	case err == nil && lockedAtName(f, path+".lock"):
		held.Close()
		return f, nil
	case err == nil:
		f.Close()
		return held, nil
	case errors.Is(err, errLockGone):
		return held, nil
	}
	return held, err
}

// servedNow says whether a plantstore serve holds the lock of the store at
// path (lockSoleServer), without taking it or making the lock file.
func servedNow(path string) bool {
	f, err := os.OpenFile(path+".lock", os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	return errors.Is(err, syscall.EWOULDBLOCK)
}

// mayWrite says why this process may not open the file at path for
// writing, or nil. It asks the kernel, with the process's effective ids
// as open(2) would, rather than opening the file: closing a descriptor
// of a store's file would release the locks SQLite holds on it in this
// process.
func mayWrite(path string) error {
	return unix.Faccessat(unix.AT_FDCWD, path, unix.W_OK, unix.AT_EACCESS)
}

// fileOwner is the user id owning the file of fi, if it can tell.
func fileOwner(fi fs.FileInfo) (int, bool) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), true
	}
	return 0, false
}

// hardLinks is the number of names the file of fi has (1 when it cannot
// tell).
func hardLinks(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// checksFiles says whether a store can tell the file at a name from the
// one it opened (device and inode), to check that its names still name
// its files (identity.go).
const checksFiles = true
