//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockSoleServer takes an exclusive lock on path+".lock", held until the
// returned file is closed or the process ends (a SIGKILL included).
func lockSoleServer(path string) (*os.File, error) {
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another plantstore serve is using %s: one server per SQLite file (run several against PostgreSQL)", path)
		}
		return nil, err
	}
	return f, nil
}
