// Command ncruces opens a WAL database with github.com/ncruces/go-sqlite3,
// writes and reads a row: a smoke test for build-mode checks (run.sh).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ncruces/go-sqlite3"
)

func main() {
	dir, err := os.MkdirTemp("", "smoke-")
	check(err)
	defer os.RemoveAll(dir)
	conn, err := sqlite3.Open(filepath.Join(dir, "smoke.db"))
	check(err)
	defer conn.Close()
	check(conn.Exec(`PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL`))
	check(conn.Exec(`CREATE TABLE plants (id INTEGER PRIMARY KEY, name TEXT NOT NULL)`))
	check(conn.Exec(`INSERT INTO plants VALUES (1, 'fern')`))
	stmt, _, err := conn.Prepare(`SELECT name, sqlite_version() FROM plants WHERE id = 1`)
	check(err)
	defer stmt.Close()
	if !stmt.Step() {
		check(fmt.Errorf("no row: %v", stmt.Err()))
	}
	fmt.Println("ok", stmt.ColumnText(0), stmt.ColumnText(1))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
