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
// process may write.
func lockSoleServer(path string) (*os.File, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		// Linux says ELOOP, FreeBSD EMLINK: ask the file system instead.
		if fi, lerr := os.Lstat(name); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symbolic link; refusing to follow it, as a link planted there would make plantstore create or open its target (remove it)", name)
		}
		return nil, fmt.Errorf("open the lock file %s: %w", name, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file; refusing to use it as the lock file (remove it)", name)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another plantstore serve is using %s: one server per SQLite file (run several against PostgreSQL)", path)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return f, nil
}
