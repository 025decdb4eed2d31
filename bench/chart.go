package main

import (
	"bytes"
	"fmt"
	"math"
)

// drawChart draws, from the sweep's results, requests per second and p99
// latency against connections, one line per scenario and target.
func drawChart(results []result, sweep []int) []byte {
	type series struct {
		scenario, target, color string
		dash                    bool
	}
	lines := []series{
		{"create", "plantstore", "#1b7837", false},
		{"create", "baseline", "#1b7837", true},
		{"get", "plantstore", "#2166ac", false},
		{"get", "baseline", "#2166ac", true},
	}
	point := func(s series, conns int) (result, bool) {
		for _, r := range results {
			if r.Sweep && r.Scenario == s.scenario && chartTarget(r) == s.target && r.Connections == conns {
				return r, true
			}
		}
		return result{}, false
	}
	const w, h, left, top, pw, ph, gap = 900, 400, 70, 40, 340, 280, 120
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	panels := []struct {
		title string
		value func(result) float64
	}{
		{"requests per second", func(r result) float64 { return r.RPS }},
		{"p99 latency (ms)", func(r result) float64 { return r.P99 }},
	}
	for pi, panel := range panels {
		x0 := left + pi*(pw+gap)
		maxV := 0.0
		for _, s := range lines {
			for _, c := range sweep {
				if r, ok := point(s, c); ok {
					maxV = math.Max(maxV, panel.value(r))
				}
			}
		}
		maxV = niceCeil(maxV)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", x0, top-15, panel.title)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, top, pw, ph)
		for i := 0; i <= 4; i++ {
			y := top + ph - ph*i/4
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#eee"/>`, x0, y, x0+pw, y)
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", x0-6, y+4, short(maxV*float64(i)/4))
		}
		xAt := func(i int) int { return x0 + 20 + (pw-40)*i/max(1, len(sweep)-1) }
		for i, c := range sweep {
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%d</text>`+"\n", xAt(i), top+ph+18, c)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">connections</text>`+"\n", x0+pw/2, top+ph+38)
		for _, s := range lines {
			var pts bytes.Buffer
			for i, c := range sweep {
				if r, ok := point(s, c); ok && maxV > 0 {
					fmt.Fprintf(&pts, "%d,%d ", xAt(i), top+ph-int(float64(ph)*panel.value(r)/maxV))
				}
			}
			dash := ""
			if s.dash {
				dash = ` stroke-dasharray="6,4"`
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", pts.String(), s.color, dash)
		}
	}
	for i, s := range lines {
		x, y := left+i*200, h-20
		dash := ""
		if s.dash {
			dash = ` stroke-dasharray="6,4"`
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`, x, y, x+30, y, s.color, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s, %s</text>`+"\n", x+36, y+4, s.scenario, s.target)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// chartTarget names r's line: "plantstore" for SQLite's rows whatever
// their label (the sweep measures only SQLite), else r's target.
func chartTarget(r result) string {
	if r.Engine == "sqlite" {
		return "plantstore"
	}
	return r.Target
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func short(v float64) string {
	switch {
	case v >= 1000 && math.Mod(v, 1000) != 0:
		return fmt.Sprintf("%.1fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
