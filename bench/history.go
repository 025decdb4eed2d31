package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// normalPace is the bare baseline's unpinned creates a second above which
// a run counts as made in the machine's normal times. In its slow spells
// (a neighbour taking CPU) the bare baseline lost up to 60% of its rate
// and plantstore, which waits on the disk as much as on the CPU, less:
// the ratios then flatter plantstore, so the history counts the two kinds
// of run apart.
const normalPace = 45_000

// runPace is the bare baseline's unpinned creates a second in results, 0
// when the run measured none.
func runPace(results []result) float64 {
	if b, _, ok := closedPair(results, "unpinned", "create"); ok {
		return b.RPS
	}
	return 0
}

// normalTimes says whether a run of that pace was made in normal times.
func normalTimes(pace float64) bool { return pace >= normalPace }

// historyRun is one results file's closed-loop ratios.
type historyRun struct {
	name    string
	pace    float64 // the bare baseline's unpinned creates a second; 0 when not measured
	results []result
}

// runHistory prints, for results files of full runs, one row a run with
// every shape's ratios against the targets, and how often each target was
// met: on a noisy machine one run says little, many side by side say how
// far a target is from being met. The files are taken in the order git
// first committed them (the order they were made), else as given.
func runHistory(files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("-history: name the results files (docs/benchmarks/harness-*.json)")
	}
	runs := make([]historyRun, 0, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var results []result
		if err := json.Unmarshal(data, &results); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		runs = append(runs, historyRun{name: strings.TrimSuffix(filepath.Base(f), ".json"), pace: runPace(results), results: results})
	}
	orderByFirstCommit(files, runs)

	fmt.Println("Closed loop, plantstore ÷ the bare baseline in the same run; **bold** where the target is met; creates as req/s ratio / p99 ratio; (d …) the durable baseline's req/s ratio where it ran.")
	fmt.Println()
	header := "| run | bare baseline's unpinned creates/s |"
	rule := "|---|---|"
	for _, shape := range shapeNames {
		for _, sc := range []string{"create", "get", "list", "mixed"} {
			header += " " + shape + " " + sc + " |"
			rule += "---|"
		}
	}
	fmt.Println(header)
	fmt.Println(rule)
	type tally struct{ met, of, normalMet, normalOf int }
	tallies := map[string]*tally{}
	for _, run := range runs {
		row := fmt.Sprintf("| %s | %s |", run.name, paceText(run.pace))
		for _, shape := range shapeNames {
			for _, sc := range []string{"create", "get", "list", "mixed"} {
				cell, ok, measured := historyCell(run.results, shape, sc)
				row += " " + cell + " |"
				if !measured {
					continue
				}
				t := tallies[shape+" "+sc]
				if t == nil {
					t = &tally{}
					tallies[shape+" "+sc] = t
				}
				t.of++
				if ok {
					t.met++
				}
				if normalTimes(run.pace) {
					t.normalOf++
					if ok {
						t.normalMet++
					}
				}
			}
		}
		fmt.Println(row)
	}

	fmt.Printf("\nHow often each target was met (normal times: the bare baseline at %d creates a second or more unpinned):\n\n", normalPace)
	fmt.Println("| shape | target | met, of the runs | in normal times | in slow spells |")
	fmt.Println("|---|---|---|---|---|")
	for _, shape := range shapeNames {
		for _, sc := range []string{"create", "get", "list", "mixed"} {
			t := tallies[shape+" "+sc]
			if t == nil {
				continue
			}
			fmt.Printf("| %s | %s | %d of %d | %d of %d | %d of %d |\n", shape, goalText(sc), t.met, t.of,
				t.normalMet, t.normalOf, t.met-t.normalMet, t.of-t.normalOf)
		}
	}
	return nil
}

// historyCell is one shape and scenario of a run: plantstore's ratio (and
// the durable baseline's), whether the scenario's targets were all met,
// and whether the run measured it at all.
func historyCell(results []result, shape, scenario string) (cell string, met, measured bool) {
	b, ps, ok := closedPair(results, shape, scenario)
	if !ok {
		return "—", false, false
	}
	var plant, durable *result
	for i := range ps {
		switch ps[i].Target {
		case "plantstore":
			plant = &ps[i]
		case "durable baseline":
			durable = &ps[i]
		}
	}
	if plant == nil {
		return "—", false, false
	}
	met = true
	var figures []string
	for _, g := range goals {
		if g.scenario != scenario {
			continue
		}
		if g.p99 {
			r := plant.P99 / b.P99
			met = met && r <= g.bound
			figures = append(figures, strings.TrimSuffix(ratioTo(r, g.bound), "×"))
			continue
		}
		r := plant.RPS / b.RPS
		met = met && r >= g.bound
		figures = append(figures, strings.TrimSuffix(ratioTo(r, g.bound), "×"))
	}
	cell = strings.Join(figures, " / ")
	if met {
		cell = "**" + cell + "**"
	}
	if durable != nil {
		cell += fmt.Sprintf(" (d %.2f)", durable.RPS/b.RPS)
	}
	return cell, met, true
}

func goalText(scenario string) string {
	var s []string
	for _, g := range goals {
		if g.scenario == scenario {
			s = append(s, g.label)
		}
	}
	return strings.Join(s, "; ")
}

func paceText(pace float64) string {
	if pace == 0 {
		return "—"
	}
	return strconv.FormatFloat(pace, 'f', 0, 64)
}

// orderByFirstCommit sorts runs, made from files in the same order, by
// the time git first committed each file; a file git does not know keeps
// its place after the known ones, in the order given.
func orderByFirstCommit(files []string, runs []historyRun) {
	at := make(map[string]int64, len(files))
	for i, f := range files {
		out, err := exec.Command("git", "log", "--diff-filter=A", "--format=%ct", "--", f).Output()
		if err != nil {
			return // no git: as given
		}
		fields := strings.Fields(string(out))
		if len(fields) == 0 {
			continue
		}
		t, err := strconv.ParseInt(fields[len(fields)-1], 10, 64)
		if err == nil {
			at[runs[i].name] = t
		}
	}
	slices.SortStableFunc(runs, func(a, b historyRun) int {
		ta, oka := at[a.name]
		tb, okb := at[b.name]
		switch {
		case oka && okb:
			return cmp.Compare(ta, tb)
		case oka:
			return -1
		case okb:
			return 1
		}
		return 0
	})
}
