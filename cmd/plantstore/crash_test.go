package main

import (
	"context"
	"database/sql"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/plantstore/plantstore/internal/sqlite"
)

// checkStore opens the file as the service would (replaying the WAL),
// checks SQLite's integrity and that every acknowledged plant is stored
// with the name it was acknowledged with.
func checkStore(t *testing.T, path string, acked map[int64]string) {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	var integrity string
	if err := raw.QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
		t.Errorf("integrity_check = %q, %v", integrity, err)
	}
	raw.Close()
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for id, name := range acked {
		p, err := db.GetPlant(context.Background(), id)
		if err != nil {
			t.Errorf("acknowledged plant %d: %v", id, err)
		} else if p.Name != name {
			t.Errorf("acknowledged plant %d is named %q, want %q", id, p.Name, name)
		}
	}
}
