// Command zombiezen opens a WAL database with zombiezen.com/go/sqlite,
// writes and reads a row: a smoke test for build-mode checks (run.sh).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

func main() {
	dir, err := os.MkdirTemp("", "smoke-")
	check(err)
	defer os.RemoveAll(dir)
	conn, err := sqlite.OpenConn(filepath.Join(dir, "smoke.db"))
	check(err)
	defer conn.Close()
	check(sqlitex.ExecuteTransient(conn, `PRAGMA synchronous=FULL`, nil))
	check(sqlitex.ExecuteTransient(conn, `CREATE TABLE plants (id INTEGER PRIMARY KEY, name TEXT NOT NULL)`, nil))
	check(sqlitex.ExecuteTransient(conn, `INSERT INTO plants VALUES (1, 'fern')`, nil))
	var name, version string
	check(sqlitex.ExecuteTransient(conn, `SELECT name, sqlite_version() FROM plants WHERE id = 1`, &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error {
			name, version = stmt.ColumnText(0), stmt.ColumnText(1)
			return nil
		},
	}))
	fmt.Println("ok", name, version)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
