// Command none is the baseline for build times: no SQLite at all.
package main

import (
	"database/sql"
	"fmt"
)

func main() { fmt.Println("ok", sql.Drivers()) }
