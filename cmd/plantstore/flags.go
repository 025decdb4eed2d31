package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// flagSet is a flag.FlagSet whose every flag also reads an environment
// variable: PLANTSTORE_ and the flag's name in capitals with _ for -
// (--max-body-bytes is PLANTSTORE_MAX_BODY_BYTES). A flag on the command
// line wins over the variable, which wins over the default. Flags declared
// on the embedded FlagSet directly, and those in commandLineOnly, are read
// from the command line only.
type flagSet struct {
	*flag.FlagSet
	getenv   func(string) string
	envErrs  map[string]error // by flag name: a malformed variable, unless the flag is given
	fromVars map[string]bool  // the flags that read a variable
	fromFile map[string]bool  // the flags whose value a _FILE variable's file gave
	usage    string
	stdout   io.Writer
	stderr   io.Writer
}

// commandLineOnly are the flags that pick what a command acts on, or what
// it does to it: never read from a variable, whichever way they are
// declared, so that a variable left over from another command never picks
// a plant, lists every page, names a token or overwrites a store. The
// flags that say where (--db, --server, --addr...), with which
// credentials (--token) and how to show it (--json) do read one.
var commandLineOnly = map[string]bool{
	"id": true, "name": true, "tag": true, "no-tag": true, "limit": true, "after": true, "all": true, "if-match": true,
	"scope": true, "replace": true, "to": true, "from": true, "force": true, "path": true, "timeout": true,
	// Shows what webhook list otherwise hides: never by a leftover variable.
	"full-urls": true,
	// webhook add's event types, webhook retry's subscriber.
	"events": true, "subscriber": true,
	// events: which events, and whether to wait for more (a leftover
	// PLANTSTORE_FOLLOW would make a script's "events" never return).
	"type": true, "follow": true,
	// restore's position of the change feed.
	"feed-after": true,
}

// newFlagSet makes the flags of "plantstore NAME"; usage is what --help
// prints above the flags: the synopsis, then what the command does.
func newFlagSet(name, usage string, getenv func(string) string, stdout, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// The flag package would print its error and the whole usage; parse
	// says it once, with a hint, instead.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, getenv: getenv, envErrs: map[string]error{}, fromVars: map[string]bool{}, fromFile: map[string]bool{},
		usage: usage, stdout: stdout, stderr: stderr}
}

// printUsage writes the --help text: the synopsis and description, then
// each flag as it is typed (--name VALUE), with its variable if it has one.
func (fs *flagSet) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: plantstore %s\n\nFlags:\n", strings.TrimSpace(fs.usage))
	fs.VisitAll(func(f *flag.Flag) {
		value, usage := flag.UnquoteUsage(f)
		switch value {
		case "value":
			value = valueName(f.Value)
		case "duration", "int", "string", "float", "uint":
			value = strings.ToUpper(value) // the flag package's own types
		}
		if isBoolFlag(f) {
			value = ""
		}
		line := "  --" + f.Name
		if value != "" {
			line += " " + value
		}
		usage = strings.ReplaceAll(usage, "\n", "\n    \t")
		if fs.fromVars[f.Name] {
			usage += " (env " + envName(f.Name) + ")"
		}
		switch d := f.DefValue; {
		case fs.fromFile[f.Name]:
			usage += " (default: the value in " + envName(f.Name) + "_FILE)" // never shown
		case d != "" && d != "0" && d != "false":
			usage += " (default " + d + ")"
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, usage)
	})
}

func valueName(v flag.Value) string {
	switch v.(type) {
	case *durationValue:
		return "DURATION"
	case *int64Value:
		return "N"
	}
	return "VALUE"
}

func envName(flagName string) string {
	return "PLANTSTORE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// given says whether the flag name was set, on the command line or by its
// variable; after parse.
func (fs *flagSet) given(name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set || fs.fromVars[name] && len(fs.variablesSet(name)) > 0
}

// settings are every flag's value and where it came from (flag, the
// variable's name, or default), for serve's debug log: the first thing to
// look at when a server does not do what its settings seemed to say. A
// value shows as in the usage text: --db with its password masked, a
// secret not at all. After parse.
func (fs *flagSet) settings() []any {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	var attrs []any
	fs.VisitAll(func(f *flag.Flag) {
		from := "default"
		switch {
		case onCommandLine[f.Name]:
			from = "flag"
		case fs.fromFile[f.Name]:
			from = envName(f.Name) + "_FILE"
		case fs.fromVars[f.Name] && fs.getenv(envName(f.Name)) != "":
			from = envName(f.Name)
		}
		attrs = append(attrs, slog.Group(f.Name, "value", f.Value.String(), "from", from))
	})
	return attrs
}

// variablesSet are those of the flag name's variables that are set: its
// own, and the one with _FILE appended.
func (fs *flagSet) variablesSet(name string) []string {
	var set []string
	for _, env := range []string{envName(name), envName(name) + "_FILE"} {
		if fs.getenv(env) != "" {
			set = append(set, env)
		}
	}
	return set
}

// fromEnv sets v from the flag's variable when that is set, or else from
// the file that the variable with _FILE appended names: container
// platforms mount secrets (a database URL with its password, a token) as
// files, and a file keeps them out of the process's environment. A value
// read from a file is never echoed in an error.
func (fs *flagSet) fromEnv(name string, v flag.Value) {
	if commandLineOnly[name] {
		return
	}
	fs.fromVars[name] = true
	env := envName(name)
	s, file := fs.getenv(env), fs.getenv(env+"_FILE")
	switch {
	case s != "" && file != "":
		fs.envErrs[name] = fmt.Errorf("%s and %s_FILE are both set: set one", env, env)
	case s != "":
		if err := v.Set(s); err != nil {
			fs.envErrs[name] = fmt.Errorf("%s=%q: %v", env, s, err)
		}
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			fs.envErrs[name] = fmt.Errorf("%s_FILE: %v", env, err)
			return
		}
		// Files written by editors and by "echo" end with a newline.
		fs.fromFile[name] = true
		if err := v.Set(strings.TrimRight(string(b), "\r\n")); err != nil {
			fs.envErrs[name] = fmt.Errorf("%s_FILE (%s): %v", env, file, err)
		}
	}
}

func (fs *flagSet) String(name, def, usage string) *string {
	p := new(string)
	*p = def
	v := (*stringValue)(p)
	fs.fromEnv(name, v)
	fs.Var(v, name, usage)
	return p
}

// Secret is a string flag, read from its variable too, whose value is
// never shown: not as a default in the usage text, nor anywhere else.
func (fs *flagSet) Secret(name, usage string) *string {
	v := &secretValue{}
	fs.fromEnv(name, v)
	fs.Var(v, name, usage)
	return &v.s
}

type secretValue struct{ s string }

func (v *secretValue) Set(s string) error { v.s = s; return nil }
func (v *secretValue) String() string     { return "" }

func (fs *flagSet) Duration(name string, def time.Duration, usage string) *time.Duration {
	return fs.duration(name, def, false, usage)
}

// OptionalDuration is a duration whose default, 0, is off: 0 may be
// given too, to turn off what the environment turned on.
func (fs *flagSet) OptionalDuration(name, usage string) *time.Duration {
	return fs.duration(name, 0, true, usage)
}

func (fs *flagSet) duration(name string, def time.Duration, zeroOff bool, usage string) *time.Duration {
	p := new(time.Duration)
	*p = def
	v := &durationValue{d: p, zeroOff: zeroOff}
	fs.fromEnv(name, v)
	fs.Var(v, name, usage)
	return p
}

func (fs *flagSet) Int64(name string, def int64, usage string) *int64 {
	p := new(int64)
	*p = def
	v := (*int64Value)(p)
	fs.fromEnv(name, v)
	fs.Var(v, name, usage)
	return p
}

// Bool is a flag given alone (--flag) or with a value (--flag=false); its
// variable takes true, false, 1 or 0.
func (fs *flagSet) Bool(name string, def bool, usage string) *bool {
	p := new(bool)
	*p = def
	v := (*boolValue)(p)
	fs.fromEnv(name, v)
	fs.Var(v, name, usage)
	return p
}

// parse parses args, allowing flags after positional arguments, and returns
// the positional ones. -h or --help prints the usage on stdout and returns
// errHelp. A mistake is one line, and a hint where to look.
func (fs *flagSet) parse(args []string) ([]string, error) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.printUsage(fs.stdout)
			return nil, errHelp
		}
	}
	if err := fs.checkFlagUse(args); err != nil {
		return nil, err
	}
	var positional []string
	args, negatives := fs.takeNegativeNumbers(args)
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fs.flagError(err)
		}
		// Flags may follow arguments ("token revoke ci --db x.db"),
		// but not "--": what follows it is arguments only.
		if rest := fs.Args(); len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	// A malformed variable matters only when the flag does not replace it.
	fs.Visit(func(f *flag.Flag) { delete(fs.envErrs, f.Name) })
	var errs []error
	for _, err := range fs.envErrs {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, usageError(err.Error())
	}
	fs.noteIgnoredVariables()
	return append(negatives, positional...), nil
}

// flagError rewords the flag package's error as one line, with a "did
// you mean" for a mistyped flag (run adds where the usage is).
func (fs *flagSet) flagError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		msg = fmt.Sprintf("%s: unknown flag --%s%s", fs.Name(), name, didYouMean(name, names, "--"))
	} else {
		// "invalid value ... for flag -limit: ...", "flag needs an argument: -name"
		msg = fs.Name() + ": " + strings.ReplaceAll(msg, " -", " --")
	}
	return usageError(msg)
}

// checkFlagUse refuses, in one pass over args, two mistakes the flag
// package would take quietly:
//   - a flag that takes a value followed by another of the command's
//     flags ("token create --name --replace"), which it would take as the
//     value ("--name=--replace" says that is meant);
//   - a flag given twice, of which it would keep the last where the user
//     may have meant both ("--scope plants:read --scope plants:write"
//     would make a token that cannot read).
func (fs *flagSet) checkFlagUse(args []string) error {
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		if args[i] == "--" {
			return nil
		}
		name, ok := strings.CutPrefix(args[i], "-")
		if !ok {
			continue
		}
		name, _, withValue := strings.Cut(strings.TrimPrefix(name, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if seen[f.Name] {
			hint := ""
			if strings.Contains(f.Usage, "comma-separated") {
				hint = ", with its values separated by commas"
			}
			return usageError(fmt.Sprintf("%s: --%s is given twice; give it once%s", fs.Name(), f.Name, hint))
		}
		seen[f.Name] = true
		if withValue || isBoolFlag(f) || i+1 == len(args) {
			continue
		}
		next := args[i+1]
		nextName, _, _ := strings.Cut(strings.TrimLeft(next, "-"), "=")
		if strings.HasPrefix(next, "-") && nextName != "" && fs.Lookup(nextName) != nil {
			return usageError(fmt.Sprintf("%s: --%s needs a value, and %s is a flag (write --%s=%s if that is the value)", fs.Name(), f.Name, next, f.Name, next))
		}
		i++ // the value
	}
	return nil
}

// noteIgnoredVariables says, on stderr, when a variable is set that looks
// like one of this command's flags but is not read, because the flag is
// read from the command line only: PLANTSTORE_ALL=true does not make
// "plants list" list every page, and the user should know it.
func (fs *flagSet) noteIgnoredVariables() {
	fs.VisitAll(func(f *flag.Flag) {
		if fs.fromVars[f.Name] || fs.stderr == nil {
			return
		}
		for _, env := range fs.variablesSet(f.Name) {
			fmt.Fprintf(fs.stderr, "plantstore: ignoring %s: --%s is read from the command line only\n", env, f.Name)
		}
	})
}

// takeNegativeNumbers takes out arguments such as -5 that are not a flag's
// value, so "plants get -5" names plant -5 instead of an unknown flag 5.
func (fs *flagSet) takeNegativeNumbers(args []string) (rest, negatives []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(rest, args[i:]...), negatives
		}
		if _, err := strconv.ParseInt(a, 10, 64); err == nil && strings.HasPrefix(a, "-") {
			negatives = append(negatives, a)
			continue
		}
		rest = append(rest, a)
		// A flag that takes a value and was given without "=" takes the
		// next argument, negative or not.
		if strings.HasPrefix(a, "-") && !strings.Contains(a, "=") {
			if f := fs.Lookup(strings.TrimLeft(a, "-")); f != nil && !isBoolFlag(f) && i+1 < len(args) {
				i++
				rest = append(rest, args[i])
			}
		}
	}
	return rest, negatives
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

// durationValue is a duration flag's value: positive, or 0 too (off)
// when zeroOff.
type durationValue struct {
	d       *time.Duration
	zeroOff bool
}

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s) // "0" too
	switch {
	case err != nil && v.zeroOff:
		return errors.New("not a duration (examples: 500ms, 10s, 2m; 0 for off)")
	case err != nil:
		return errors.New("not a duration (examples: 500ms, 10s, 2m)")
	case d < 0 && v.zeroOff:
		return errors.New("must not be negative")
	case d <= 0 && !v.zeroOff:
		return errors.New("must be positive")
	}
	*v.d = d
	return nil
}

func (v *durationValue) String() string {
	if v.d == nil { // the zero value flag makes to find the default
		return "0s"
	}
	return v.d.String()
}

type int64Value int64

func (v *int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("not an integer")
	}
	if n < 0 {
		return errors.New("must not be negative")
	}
	*v = int64Value(n)
	return nil
}
func (v *int64Value) String() string { return strconv.FormatInt(int64(*v), 10) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("not a boolean (true or false)")
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

// checkVariables refuses PLANTSTORE_ variables in environ that no flag of
// any command reads, so a misspelt one (PLANTSTORE_ADRR) stops the start
// instead of being silently ignored, naming the closest known variable.
// Variables other commands read (PLANTSTORE_TOKEN, PLANTSTORE_JSON) may
// well share serve's environment and pass. Those named after a flag that
// is read from the command line only (PLANTSTORE_ALL) change nothing: they
// come back as warnings, for the log. PLANTSTORE_TEST_ is the test
// suites'.
func checkVariables(environ []string, known variables) (warnings []string, err error) {
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "PLANTSTORE_") || strings.HasPrefix(name, "PLANTSTORE_TEST_") || known.read[name] {
			continue
		}
		if flag, ok := known.commandLineOnly[strings.TrimSuffix(name, "_FILE")]; ok {
			warnings = append(warnings, fmt.Sprintf("ignoring %s: no command reads it (%s is given on the command line)", name, flag))
			continue
		}
		unknown = append(unknown, name)
	}
	if len(unknown) == 0 {
		return warnings, nil
	}
	slices.Sort(unknown)
	var names []string
	for name := range known.read {
		names = append(names, name)
	}
	slices.Sort(names)
	var msgs []string
	for _, name := range unknown {
		msgs = append(msgs, fmt.Sprintf("unknown configuration variable %s%s", name, didYouMean(name, names, "")))
	}
	return nil, usageError(strings.Join(msgs, "; "))
}

// didYouMean is " (did you mean X?)" for the candidate closest to word,
// when one is close enough to be a slip of the keyboard, else "".
func didYouMean(word string, candidates []string, prefix string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		if d := editDistance(word, c); bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	// The shared PLANTSTORE_ prefix says nothing of closeness.
	size := len(strings.TrimPrefix(word, "PLANTSTORE_"))
	if bestDist < 0 || bestDist > max(2, size/3) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s%s?)", prefix, best)
}

// editDistance counts the insertions, deletions, substitutions and
// swaps of neighbours that turn a into b (optimal string alignment).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// helpFlagNames are the flags a --help text lists.
func helpFlagNames(help string) []string {
	var names []string
	for line := range strings.Lines(help) {
		if rest, ok := strings.CutPrefix(line, "  --"); ok {
			name, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
			names = append(names, name)
		}
	}
	return names
}
