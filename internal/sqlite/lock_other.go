//go:build !unix

package sqlite

import (
	"io/fs"
	"os"
)

// lockSoleServer takes no lock where flock does not exist; the plant cache
// is then off (see Open).
func lockSoleServer(string) (*os.File, bool, error) { return nil, false, nil }

// relock has no lock to keep here.
func relock(held *os.File, _ string) (*os.File, error) { return held, nil }

// servedNow cannot tell without flock; Open then migrates as before.
func servedNow(string) bool { return false }

// mayWrite leaves it to SQLite's open here.
func mayWrite(string) error { return nil }

// hardLinks cannot tell links apart here: one name.
func hardLinks(fs.FileInfo) uint64 { return 1 }

// fileOwner cannot tell here.
func fileOwner(fs.FileInfo) (int, bool) { return 0, false }

// checksFiles is false here: Windows does not let a file SQLite has open
// be deleted or renamed over, and os.SameFile would open the store's
// files to learn their identity. The store checks nothing (identity.go).
const checksFiles = false
