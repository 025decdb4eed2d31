package main

import (
	"bytes"
	"io"
	"unicode"

	"golang.org/x/text/width"
)

// table writes rows of cells in aligned columns, as text/tabwriter did
// with a padding of two spaces (each column as wide as its widest cell
// and two spaces, the last column as it is), but measures each cell by
// the columns a terminal gives it (cellWidth). tabwriter counts runes, so
// a name in Chinese or Japanese, or with an emoji, pushed the rest of its
// row out of line.
type table struct {
	w      io.Writer
	rows   [][]string
	widths [][]int // each cell's, measured once, by add
	column []int   // each column's: its widest cell's
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: w}
	t.add(header...)
	return t
}

func (t *table) add(cells ...string) {
	widths := make([]int, len(cells))
	for i, cell := range cells {
		widths[i] = cellWidth(cell)
		if i == len(t.column) {
			t.column = append(t.column, 0)
		}
		t.column[i] = max(t.column[i], widths[i])
	}
	t.rows = append(t.rows, cells)
	t.widths = append(t.widths, widths)
}

// flush writes the rows added since the last flush, aligned among
// themselves.
func (t *table) flush() error {
	var b bytes.Buffer
	for r, row := range t.rows {
		for i, cell := range row {
			b.WriteString(cell)
			if i < len(row)-1 {
				for range t.column[i] - t.widths[r][i] + 2 {
					b.WriteByte(' ')
				}
			}
		}
		b.WriteByte('\n')
	}
	t.rows, t.widths, t.column = t.rows[:0], t.widths[:0], t.column[:0]
	_, err := t.w.Write(b.Bytes())
	return err
}

// cellWidth is how many columns a terminal gives s: two for each East
// Asian wide or fullwidth character (漢字, ＡＢＣ, most emoji), none for
// a combining mark (the accent of a decomposed "é"), one for the rest.
// The characters a terminal hides are escaped before a cell is measured
// (tableCell).
func cellWidth(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case unicode.In(r, unicode.Mn, unicode.Me):
		case r >= 0x1100 && isWide(r):
			n += 2
		default:
			n++
		}
	}
	return n
}

func isWide(r rune) bool {
	k := width.LookupRune(r).Kind()
	return k == width.EastAsianWide || k == width.EastAsianFullwidth
}
