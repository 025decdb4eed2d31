package apitest

import (
	"os"
	"testing"
)

// DirNames lists the names in dir, sorted, failing the test if it cannot
// be read.
func DirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
