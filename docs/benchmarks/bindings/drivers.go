package main

// The database/sql drivers. mattn and ncruces both register "sqlite3":
// build with -ldflags '-X github.com/ncruces/go-sqlite3/driver.driverName=sqlite3-ncruces'
// (run.sh does) or the program panics at start.
import (
	_ "github.com/mattn/go-sqlite3"
	_ "github.com/ncruces/go-sqlite3/driver"
	_ "modernc.org/sqlite"
)
