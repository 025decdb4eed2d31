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
	w    io.Writer
	rows [][]string
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: w}
	t.add(header...)
	return t
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// flush writes the rows added since the last flush, aligned among
// themselves.
func (t *table) flush() error {
	var widths []int
	for _, row := range t.rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], cellWidth(cell))
		}
	}
	var b bytes.Buffer
	for _, row := range t.rows {
		for i, cell := range row {
			b.WriteString(cell)
			if i < len(row)-1 {
				b.Write(bytes.Repeat([]byte{' '}, widths[i]-cellWidth(cell)+2))
			}
		}
		b.WriteByte('\n')
	}
	t.rows = t.rows[:0]
	_, err := t.w.Write(b.Bytes())
	return err
}

// cellWidth is how many columns a terminal gives s: two for each East
// Asian wide or fullwidth character (漢字, ＡＢＣ, most emoji), none for a combining mark (the accent of a decomposed "é"),
// one for the rest. The characters a terminal hides are escaped before a
// cell is measured (tableCell).
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
