//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// lockSoleServer takes an exclusive lock on path+".lock", held until the
// returned file is closed or the process ends (a SIGKILL included). The
// file is created 0600 and never through a symbolic link: a link planted
// there would make plantstore create or open its target, anywhere the
// process may write. created says whether this call made the file, so
// that a store that fails to open does not leave it behind.
func lockSoleServer(path string) (f *os.File, created bool, err error) {
	name := path + ".lock"
	f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	created = err == nil
	if errors.Is(err, fs.ErrExist) {
		f, err = os.OpenFile(name, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	}
	if err != nil {
		// Linux says ELOOP, FreeBSD EMLINK: ask the file system instead.
		if fi, lerr := os.Lstat(name); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, false, fmt.Errorf("%s is a symbolic link; refusing to follow it, as a link planted there would make plantstore create or open its target (remove it)", name)
		}
		return nil, false, fmt.Errorf("open the lock file %s: %w", name, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, false, fmt.Errorf("%s is not a regular file; refusing to use it as the lock file (remove it)", name)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, fmt.Errorf("another plantstore serve is using %s: one server per SQLite file (run several against PostgreSQL)", path)
		}
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	return f, created, nil
}
