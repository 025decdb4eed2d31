package migration

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	ms, err := Load(fstest.MapFS{
		"m/0002_tags.sql": {Data: []byte("CREATE INDEX b")},
		"m/0001_init.sql": {Data: []byte("CREATE TABLE a")},
		"m/README":        {Data: []byte("not a migration")},
	}, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0] != (Migration{1, "0001_init.sql", "CREATE TABLE a"}) || ms[1] != (Migration{2, "0002_tags.sql", "CREATE INDEX b"}) {
		t.Errorf("Load = %+v", ms)
	}
}

func TestLoadRefusesAGap(t *testing.T) {
	_, err := Load(fstest.MapFS{
		"m/0001_init.sql": {Data: []byte("x")},
		"m/0003_late.sql": {Data: []byte("y")},
	}, "m")
	if err == nil || !strings.Contains(err.Error(), "0003_late.sql: want version 2") {
		t.Errorf("Load with a gap: %v", err)
	}
}
