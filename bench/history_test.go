package main

import (
	"strings"
	"testing"
)

func TestHistoryCell(t *testing.T) {
	run := []result{
		{Target: "baseline", Shape: "pinned", Scenario: "create", Mode: "closed", RPS: 1000, P99: 2},
		{Target: "plantstore", Shape: "pinned", Scenario: "create", Mode: "closed", RPS: 700, P99: 3.2},
		{Target: "durable baseline", Shape: "pinned", Scenario: "create", Mode: "closed", RPS: 800, P99: 2},
		// A sweep point and an open-loop run are not the closed-loop pair.
		{Target: "plantstore", Shape: "pinned", Scenario: "create", Mode: "closed", RPS: 10, P99: 1, Sweep: true},
		{Target: "plantstore", Shape: "pinned", Scenario: "create", Mode: "open", RPS: 500, P99: 1},
		{Target: "baseline", Shape: "pinned", Scenario: "get", Mode: "closed", RPS: 1000, P99: 1},
		{Target: "plantstore", Shape: "pinned", Scenario: "get", Mode: "closed", RPS: 801, P99: 9},
	}
	cases := []struct {
		shape, scenario, cell string
		met, measured         bool
	}{
		// 0.70 is over 0.65 but a p99 1.6 times the baseline's is not met.
		{"pinned", "create", "0.70 / 1.60 (d 0.80)", false, true},
		{"pinned", "get", "**0.801**", true, true},
		{"pinned", "list", "—", false, false},
		{"unpinned", "get", "—", false, false},
	}
	for _, c := range cases {
		cell, met, measured := historyCell(run, c.shape, c.scenario)
		if cell != c.cell || met != c.met || measured != c.measured {
			t.Errorf("%s %s: got %q met=%v measured=%v, want %q met=%v measured=%v",
				c.shape, c.scenario, cell, met, measured, c.cell, c.met, c.measured)
		}
	}
}

// Each run's summary says which kind of run it was, by the same pace the
// history counts runs apart with.
func TestPaceNote(t *testing.T) {
	run := func(rps float64) []result {
		return []result{
			{Target: "baseline", Shape: "unpinned", Scenario: "create", Mode: "closed", RPS: rps, P99: 2},
			{Target: "plantstore", Shape: "unpinned", Scenario: "create", Mode: "closed", RPS: rps / 2, P99: 2},
		}
	}
	if got := paceNote(run(normalPace)); !strings.Contains(got, "normal times") || !strings.Contains(got, "45000 creates") {
		t.Errorf("at the normal pace: %q", got)
	}
	if got := paceNote(run(normalPace - 1)); !strings.Contains(got, "slow spell") || !strings.Contains(got, "44999 creates") {
		t.Errorf("below the normal pace: %q", got)
	}
	pinned := []result{
		{Target: "baseline", Shape: "pinned", Scenario: "create", Mode: "closed", RPS: 60000, P99: 2},
		{Target: "plantstore", Shape: "pinned", Scenario: "create", Mode: "closed", RPS: 40000, P99: 2},
	}
	if got := paceNote(pinned); got != "" {
		t.Errorf("without unpinned creates: %q, want none", got)
	}
}
