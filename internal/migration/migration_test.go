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

func TestCheckRecorded(t *testing.T) {
	// {1, 9}: newer than known, which NewerSchemaError says.
	for _, ok := range [][]int{nil, {1}, {1, 2, 3}, {1, 9}} {
		if err := CheckRecorded(ok, 3); err != nil {
			t.Errorf("CheckRecorded(%v) = %v", ok, err)
		}
	}
	for versions, want := range map[string]struct {
		v   []int
		msg string
	}{
		"a rollback stopped part-way": {[]int{1, 2, 5}, "records versions 1, 2 and 5, not all of 1 to 5"},
		"no first":                    {[]int{2}, "records versions 2, not all of 1 to 2"},
	} {
		err := CheckRecorded(want.v, 5)
		if err == nil || !strings.Contains(err.Error(), want.msg) || !strings.Contains(err.Error(), "docs/upgrades.md") {
			t.Errorf("%s: CheckRecorded(%v) = %v; want %q", versions, want.v, err, want.msg)
		}
	}
}

func TestReversalSteps(t *testing.T) {
	order, steps, err := ReversalSteps("# 3 -> 2\nDROP a;\n# 2 -> 1\nDROP b;\nDROP c;\n", "# %d -> %d")
	if err != nil || len(order) != 2 || order[0] != 3 || order[1] != 2 || steps[3] != "DROP a;\n" || steps[2] != "DROP b;\nDROP c;\n" {
		t.Errorf("ReversalSteps = %v, %v, %v", order, steps, err)
	}
	if _, _, err := ReversalSteps("-- 3 -> 1\nDROP a;\n", "-- %d -> %d"); err == nil || !strings.Contains(err.Error(), "step 3 -> 1") {
		t.Errorf("a step down by two: %v", err)
	}
}
