// Command mattn opens a WAL database with mattn's database/sql driver, writes
// and reads a row: a smoke test for build-mode checks (run.sh).
package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	_ "github.com/mattn/go-sqlite3"
)

func main() {
	dir, err := os.MkdirTemp("", "smoke-")
	check(err)
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "smoke.db")
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=FULL")
	check(err)
	defer db.Close()
	_, err = db.Exec(`CREATE TABLE plants (id INTEGER PRIMARY KEY, name TEXT NOT NULL)`)
	check(err)
	_, err = db.Exec(`INSERT INTO plants VALUES (1, 'fern')`)
	check(err)
	var name, mode, version string
	check(db.QueryRow(`SELECT name FROM plants WHERE id = 1`).Scan(&name))
	check(db.QueryRow(`PRAGMA journal_mode`).Scan(&mode))
	check(db.QueryRow(`SELECT sqlite_version()`).Scan(&version))
	fmt.Println("ok", name, mode, version)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
