package main

import (
	"strings"
	"testing"

	"github.com/plantstore/plantstore/client"
)

// A name or tag holding a bidi override, an isolate, a zero-width or other
// invisible format character cannot pass for another plant or forge a row
// in the table: such a cell is printed quoted, with the character escaped.
func TestPlantTableEscapesFormatCharacters(t *testing.T) {
	t.Parallel()
	tag := func(s string) *string { return &s }
	for _, tc := range []struct {
		plant    client.Plant
		name     string // how the NAME cell must read
		tag      string // how the TAG cell must read
		notInRow []rune
	}{
		// "Fern" reversed on screen would read "nreF"; it reads "\u202eFern".
		{client.Plant{ID: 1, Name: "\u202eFern", Tag: tag("indoor\u202c")}, `"\u202eFern"`, `"indoor\u202c"`, []rune{0x202e, 0x202c}},
		{client.Plant{ID: 2, Name: "Aloe\u2066vera\u2069"}, `"Aloe\u2066vera\u2069"`, "-", []rune{0x2066, 0x2069}},
		{client.Plant{ID: 3, Name: "Mo\u200bss", Tag: tag("sh\u200dade")}, `"Mo\u200bss"`, `"sh\u200dade"`, []rune{0x200b, 0x200d}},
		{client.Plant{ID: 4, Name: "Ivy\u2028 5  forged  row"}, `"Ivy\u2028 5  forged  row"`, "-", []rune{0x2028}},
		{client.Plant{ID: 5, Name: "\ufeffCactus\u00ad"}, `"\ufeffCactus\u00ad"`, "-", []rune{0xfeff, 0xad}},
		{client.Plant{ID: 6, Name: `Say "hi"`}, `"Say \"hi\""`, "-", nil},
		// Printable to Go, yet shown as nothing: a combining grapheme
		// joiner, a variation selector, a Hangul filler, a variation
		// selector of the supplement; and a quoted tag escapes them too.
		{client.Plant{ID: 9, Name: "alice\u034f", Tag: tag("two\ufe0f words")}, `"alice\u034f"`, `"two\ufe0f words"`, []rune{0x34f, 0xfe0f}},
		{client.Plant{ID: 10, Name: "\u3164Fern\U000e0100"}, `"\u3164Fern\U000e0100"`, "-", []rune{0x3164, 0xe0100}},
		// The braille pattern blank is printable to Go, and blank on screen.
		{client.Plant{ID: 13, Name: "Fern\u2800"}, `"Fern\u2800"`, "-", []rune{0x2800}},
		// A space at either end would read as the column's padding.
		{client.Plant{ID: 11, Name: "Fern "}, `"Fern "`, "-", nil},
		{client.Plant{ID: 12, Name: " Fern", Tag: tag("shade")}, `" Fern"`, "shade", nil},
		// Visible text is left alone, accents and scripts included.
		{client.Plant{ID: 7, Name: "Monstera déliciosa", Tag: tag("熱帯")}, "Monstera déliciosa", "熱帯", nil},
		{client.Plant{ID: 8, Name: `back\slash`, Tag: tag("two words")}, `back\slash`, `"two words"`, nil},
	} {
		var out strings.Builder
		if err := (plantPrinter{w: &out}).one(tc.plant); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		if len(lines) != 2 {
			t.Errorf("plant %d: %d lines, want a header and one row:\n%s", tc.plant.ID, len(lines), out.String())
			continue
		}
		row := lines[1]
		for _, r := range tc.notInRow {
			if strings.ContainsRune(row, r) {
				t.Errorf("plant %d: the row holds U+%04X unescaped: %q", tc.plant.ID, r, row)
			}
		}
		fields := strings.SplitN(row, "  ", 2)
		rest := strings.TrimSpace(fields[1])
		if !strings.HasPrefix(rest, tc.name) || strings.TrimSpace(strings.TrimPrefix(rest, tc.name)) != tc.tag {
			t.Errorf("plant %d: row %q, want name %s and tag %s", tc.plant.ID, row, tc.name, tc.tag)
		}
	}
}

// plants list --all writes what it reads as it reads it, in the very
// form a whole listing takes: the same JSON array, the same table.
func TestStreamedListingReadsAsAWholeOne(t *testing.T) {
	t.Parallel()
	tag := "indoor"
	for _, plants := range [][]client.Plant{nil, {{ID: 1, Name: "Fern"}}, {{ID: 1, Name: "Fern", Tag: &tag}, {ID: 22, Name: "Aloe <vera> & co"}, {ID: 333, Name: "\u202eMoss"}}} {
		for _, json := range []bool{false, true} {
			var whole, streamed strings.Builder
			if err := (plantPrinter{w: &whole, json: json}).many(plants); err != nil {
				t.Fatal(err)
			}
			seq := func(yield func(client.Plant, error) bool) {
				for _, p := range plants {
					if !yield(p, nil) {
						return
					}
				}
			}
			if err := (plantPrinter{w: &streamed, json: json}).stream(seq); err != nil {
				t.Fatal(err)
			}
			if streamed.String() != whole.String() {
				t.Errorf("%d plants, json %v: streamed\n%s\nwant\n%s", len(plants), json, streamed.String(), whole.String())
			}
		}
	}
}
