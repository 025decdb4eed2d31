// Package migration reads the schema migrations a storage engine embeds:
// SQL files named NNNN_what.sql, versions 1, 2, 3... with no gaps. Each
// engine applies them in its own way; the naming rule and the refusal of a
// newer schema are the same for all.
package migration

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one schema change.
type Migration struct {
	Version int
	Name    string // the file's name, recorded in schema_migrations
	SQL     string
}

// Load reads the *.sql files of dir in fsys, in version order, and checks
// that their versions run 1, 2, 3... without gaps.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for i, name := range names { // fs.Glob returns names sorted
		base := path.Base(name)
		n, _, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(n)
		if err != nil || version != i+1 {
			return nil, fmt.Errorf("migration %s: want version %d", base, i+1)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: version, Name: base, SQL: string(body)})
	}
	return ms, nil
}

// NewerSchemaError is the refusal to run on a schema at version found when
// this binary knows versions up to known: a newer binary wrote it, and
// running on could corrupt the data it added.
func NewerSchemaError(found, known int) error {
	return fmt.Errorf("database schema version %d is newer than this plantstore knows (%d); upgrade plantstore", found, known)
}

// CheckRecorded refuses a schema whose recorded versions (ascending) are
// not 1, 2, 3... without gaps, with an *IncompleteSchemaError: a rollback
// that stopped part-way, say, by hand (docs/upgrades.md). Applying the
// migrations that follow the highest version would build on tables that
// are not there, and a server would fail at its first write instead of
// saying why at start.
// A schema newer than the known versions is left to NewerSchemaError.
func CheckRecorded(versions []int, known int) error {
	if len(versions) > 0 && versions[len(versions)-1] > known {
		return nil
	}
	for i, v := range versions {
		if v != i+1 {
			return &IncompleteSchemaError{Versions: versions}
		}
	}
	return nil
}

// IncompleteSchemaError is CheckRecorded's refusal.
type IncompleteSchemaError struct {
	Versions []int // as recorded, ascending
}

func (e *IncompleteSchemaError) Error() string {
	s := make([]string, len(e.Versions))
	for i, v := range e.Versions {
		s[i] = strconv.Itoa(v)
	}
	list := s[0]
	if len(s) > 1 {
		list = strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
	}
	return fmt.Sprintf("database schema is incomplete: schema_migrations records versions %s, not all of 1 to %d; did a rollback stop part-way? Finish it (docs/upgrades.md) or restore a backup",
		list, e.Versions[len(e.Versions)-1])
}

// CheckDocReversals holds the rollback docs/upgrades.md (doc) gives for one
// engine (see DocReversals) to down, the reversals the engine's tests run
// for each version above 1: a step for each, newest first, with the same
// statements once normal has taken out what differs only in form. It
// returns what does not hold.
func CheckDocReversals(doc, intro, marker string, known int, down map[int]string, normal func(string) string) []string {
	order, steps, err := DocReversals(doc, intro, marker)
	if err != nil {
		return []string{err.Error()}
	}
	var want []int
	for v := known; v > 1; v-- {
		want = append(want, v)
	}
	var problems []string
	if !slices.Equal(order, want) {
		problems = append(problems, fmt.Sprintf("the steps go from %v; want %v, the newest first", order, want))
	}
	for _, v := range want {
		if got, want := normal(steps[v]), normal(down[v]); got != want {
			problems = append(problems, fmt.Sprintf("step %d -> %d:\n%s\nwant\n%s", v, v-1, got, want))
		}
	}
	return problems
}

// DocReversals reads the rollback steps docs/upgrades.md (doc) gives for
// one engine: the code block that follows intro (say "PostgreSQL:\n\n```sql\n")
// under "B. Undo the migrations by hand.", in ReversalSteps' form.
func DocReversals(doc, intro, marker string) (order []int, steps map[int]string, err error) {
	_, section, _ := strings.Cut(doc, "**B. Undo the migrations by hand.**")
	_, section, _ = strings.Cut(section, intro)
	block, _, ok := strings.Cut(section, "```")
	if !ok {
		return nil, nil, fmt.Errorf("no block %q under \"B. Undo the migrations by hand.\"", intro)
	}
	return ReversalSteps(block, marker)
}

// ReversalSteps reads rollback steps from block: each step starts with a
// line in the form of marker ("-- %d -> %d" or "# %d -> %d") and holds the
// lines up to the next. It returns the steps' from-versions in the order
// given and each one's text, which the engines' tests hold to the
// reversals they run; a step that does not go down by one is an error.
func ReversalSteps(block, marker string) (order []int, steps map[int]string, err error) {
	steps = map[int]string{}
	var current int
	for line := range strings.Lines(block) {
		var from, to int
		if n, _ := fmt.Sscanf(line, marker, &from, &to); n == 2 {
			if to != from-1 {
				return nil, nil, fmt.Errorf("step %d -> %d: want one version down", from, to)
			}
			current = from
			order = append(order, from)
			continue
		}
		steps[current] += line
	}
	return order, steps, nil
}
