package main

import (
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"
)

// Columns line up on a terminal whatever the script: each row's TAG
// starts at the same screen column, wide characters counting two and
// combining marks none.
func TestTableAlignsWideCharacters(t *testing.T) {
	var out strings.Builder
	tb := newTable(&out, "ID", "NAME", "TAG")
	tb.add("1", "Fern", "green")
	tb.add("2", "盆栽", "tree")           // two wide characters: four columns
	tb.add("3", "🌵 Cactus", "dry")      // an emoji: two columns
	tb.add("4", "Cafe\u0301", "accent") // "Café" with a combining accent: four columns
	tb.add("5", "ＡＢＣ", "fullwidth")     // fullwidth letters: six columns
	if err := tb.flush(); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"ID  NAME       TAG\n" +
		"1   Fern       green\n" +
		"2   盆栽       tree\n" +
		"3   🌵 Cactus  dry\n" +
		"4   Cafe\u0301       accent\n" +
		"5   ＡＢＣ     fullwidth\n"
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
}

// For text of one column a character, the table is what text/tabwriter
// wrote before (padding 2), so scripts that cut its columns see no change.
func TestTableAsTabwriterForNarrowText(t *testing.T) {
	rows := [][]string{{"ID", "NAME", "TAG"}, {"1", "Aloe vera", "-"}, {"22", "", `""`}, {"333", "Fern", "a-much-longer-tag"}}
	var got, want strings.Builder
	tb := newTable(&got, rows[0]...)
	tw := tabwriter.NewWriter(&want, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(rows[0], "\t"))
	for _, r := range rows[1:] {
		tb.add(r...)
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tb.flush()
	tw.Flush()
	if got.String() != want.String() {
		t.Errorf("table:\n%q\ntabwriter:\n%q", got.String(), want.String())
	}
}
