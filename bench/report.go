package main

import (
	"fmt"
	"strconv"
	"strings"
)

// The report: a row per run, the targets of each shape, and a summary
// over the shapes.

func printHeader() {
	fmt.Println("| scenario | mode | target | req/s | p50 ms | p99 ms | p99.9 ms | errors | peak RSS MiB | req/s ratio | p99 ratio | server CPU µs/req | CPU ratio | mean batch | generator busy | each round req/s |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
}

// printRows prints the baseline's row, then each plantstore target's with
// its ratios to the baseline.
func printRows(b result, ps ...result) {
	mode := "closed"
	if b.Mode == "open" {
		mode = fmt.Sprintf("open, %d/s", b.Rate)
	}
	row := func(r result, ratios string) {
		batch := "—"
		if r.MeanBatch > 0 {
			batch = fmt.Sprintf("%.1f", r.MeanBatch)
		}
		fmt.Printf("| %s | %s | %s | %.0f | %.2f | %.2f | %.2f | %d | %.1f | %s | %s | %s | %s |\n",
			r.Scenario, mode, r.Target, r.RPS, r.P50, r.P99, r.P999, r.Errors, r.PeakRSSMiB, ratios, batch, busy(r), eachRound(r))
	}
	row(b, fmt.Sprintf("1.00 | 1.00 | %.1f | 1.00", b.ServerCPUUs))
	for _, p := range ps {
		row(p, fmt.Sprintf("%.2f | %.2f | %.1f | %s", p.RPS/b.RPS, p.P99/b.P99, p.ServerCPUUs, ratio(p.ServerCPUUs, b.ServerCPUUs)))
	}
}

// eachRound lists the req/s of the closed-loop rounds r is the best of.
func eachRound(r result) string {
	if len(r.RoundsRPS) == 0 {
		return "—"
	}
	s := make([]string, len(r.RoundsRPS))
	for i, v := range r.RoundsRPS {
		s[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(s, ", ")
}

func busy(r result) string {
	s := fmt.Sprintf("%.0f%% of %d", r.GeneratorBusyPct, r.GeneratorCPUs)
	if r.suspect() {
		s += " **suspect**"
	}
	return s
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// A goal is one of the targets: plantstore's closed-loop figure
// for scenario against the baseline's in the same run.
type goal struct {
	scenario, label string
	bound           float64
	p99             bool // p99 ratio at most bound; else req/s ratio at least bound
}

var goals = []goal{
	{"create", "POST /plants req/s ≥ 0.65×", 0.65, false},
	{"create", "POST /plants p99 ≤ 1.5×", 1.5, true},
	{"get", "GET /plants/{id} req/s ≥ 0.80×", 0.80, false},
	{"list", "GET /plants?limit=100 req/s ≥ 0.50×", 0.50, false},
	{"mixed", "mixed (80% get, 20% create) req/s ≥ 0.75×", 0.75, false},
}

// closedPair finds a shape's closed-loop (not sweep) runs of scenario: the
// baseline's and each plantstore target's.
func closedPair(results []result, shape, scenario string) (b result, ps []result, ok bool) {
	for _, r := range results {
		if r.Shape != shape || r.Scenario != scenario || r.Mode != "closed" || r.Sweep {
			continue
		}
		if r.Target == "baseline" {
			b, ok = r, true
		} else {
			ps = append(ps, r)
		}
	}
	return b, ps, ok && len(ps) > 0
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// ratioTo prints a ratio with two decimals, or three when two would round
// it onto the target's bound from the other side (0.647 against 0.65).
func ratioTo(r, bound float64) string {
	two := fmt.Sprintf("%.2f×", r)
	if rounded, _ := strconv.ParseFloat(two[:len(two)-len("×")], 64); rounded == bound && r != bound {
		return fmt.Sprintf("%.3f×", r)
	}
	return two
}

// printTargets prints each target with its figure in shape's run, and a
// second view from the servers' CPU time per request: the req/s ratio the
// two would have if each had the same CPU and CPU were its only limit
// (baseline µs / plantstore µs), steadier on a noisy machine.
func printTargets(shape string, results []result) {
	fmt.Printf("\nAgainst the targets (shape %s; closed loop; the CPU view is baseline CPU µs/req ÷ plantstore's):\n\n", shape)
	fmt.Println("| target | plantstore | figure | status | CPU view | status by CPU | note |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, g := range goals {
		b, ps, ok := closedPair(results, shape, g.scenario)
		if !ok {
			continue
		}
		for _, p := range ps {
			var note []string
			if b.suspect() || p.suspect() {
				note = append(note, "generator over 90% busy: suspect")
			}
			if p.Errors > 0 {
				note = append(note, fmt.Sprintf("%d errors", p.Errors))
			}
			if g.p99 {
				r := p.P99 / b.P99
				fmt.Printf("| %s | %s | %s | %s | | | %s |\n", g.label, p.Target, ratioTo(r, g.bound), met(r <= g.bound), strings.Join(note, "; "))
				continue
			}
			r := p.RPS / b.RPS
			cpu, cpuStatus := "—", ""
			if p.ServerCPUUs > 0 && b.ServerCPUUs > 0 {
				v := b.ServerCPUUs / p.ServerCPUUs
				cpu, cpuStatus = ratioTo(v, g.bound), met(v >= g.bound)
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", g.label, p.Target, ratioTo(r, g.bound), met(r >= g.bound), cpu, cpuStatus, strings.Join(note, "; "))
		}
	}
}

// printSummary prints the closed-loop figures of every shape side by side.
func printSummary(results []result, shapes []string) {
	fmt.Println("\n## Summary: closed loop, every shape (ratios plantstore / baseline)")
	fmt.Println()
	fmt.Println("| shape | scenario | target | req/s baseline | req/s plantstore | req/s ratio | goal | p99 ms b / p | p99 ratio | CPU µs/req b / p | CPU view | mean batch | generator busy b / p |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, shape := range shapes {
		for _, g := range goals {
			if g.p99 {
				continue
			}
			b, ps, ok := closedPair(results, shape, g.scenario)
			if !ok {
				continue
			}
			for _, p := range ps {
				r := p.RPS / b.RPS
				goal := fmt.Sprintf("≥ %.2f: %s", g.bound, met(r >= g.bound))
				if g.scenario == "create" {
					goal += fmt.Sprintf("; p99 ≤ 1.5: %s", met(p.P99/b.P99 <= 1.5))
				}
				batch := "—"
				if p.MeanBatch > 0 {
					batch = fmt.Sprintf("%.1f", p.MeanBatch)
				}
				cpuView := "—"
				if p.ServerCPUUs > 0 {
					cpuView = strings.TrimSuffix(ratioTo(b.ServerCPUUs/p.ServerCPUUs, g.bound), "×")
				}
				fmt.Printf("| %s | %s | %s | %.0f | %.0f | %s | %s | %.2f / %.2f | %s | %.1f / %.1f | %s | %s | %.0f%% / %.0f%% |\n",
					shape, g.scenario, p.Target, b.RPS, p.RPS, strings.TrimSuffix(ratioTo(r, g.bound), "×"), goal, b.P99, p.P99,
					strings.TrimSuffix(ratioTo(p.P99/b.P99, 1.5), "×"),
					b.ServerCPUUs, p.ServerCPUUs, cpuView, batch, b.GeneratorBusyPct, p.GeneratorBusyPct)
			}
		}
	}
	fmt.Println()
}

// paceNote says whether the run was made in the machine's normal times or
// in a slow spell, by the bare baseline's unpinned creates (normalPace),
// as -history counts runs: a single run's ratios mean little without it.
// It is empty when the run measured no unpinned creates.
func paceNote(results []result) string {
	pace := runPace(results)
	switch {
	case pace == 0:
		return ""
	case normalTimes(pace):
		return fmt.Sprintf("The bare baseline made %.0f creates a second unpinned: the machine's normal times (%d or more).", pace, normalPace)
	}
	return fmt.Sprintf("The bare baseline made %.0f creates a second unpinned, under %d: a slow spell, a neighbour taking CPU. The baseline then loses more than plantstore, and the ratios flatter plantstore; -history counts such runs apart.", pace, normalPace)
}
