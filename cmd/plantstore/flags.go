package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// flagSet is a flag.FlagSet whose every flag also reads an environment
// variable: PLANTSTORE_ and the flag's name in capitals with _ for -
// (--max-body-bytes is PLANTSTORE_MAX_BODY_BYTES). A flag on the command
// line wins over the variable, which wins over the default.
type flagSet struct {
	*flag.FlagSet
	getenv  func(string) string
	envErrs map[string]error // by flag name: a malformed variable, unless the flag is given
	stdout  io.Writer
}

// newFlagSet makes the flags of "plantstore NAME"; usage is what --help
// prints above the flags: the synopsis, then what the command does.
func newFlagSet(name, usage string, getenv func(string) string, stdout, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: plantstore %s\n\nFlags:\n", strings.TrimSpace(usage))
		fs.PrintDefaults()
	}
	return &flagSet{FlagSet: fs, getenv: getenv, envErrs: map[string]error{}, stdout: stdout}
}

func envName(flagName string) string {
	return "PLANTSTORE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// fromEnv sets v from the flag's variable when that is set, or else from
// the file that the variable with _FILE appended names: container
// platforms mount secrets (a database URL with its password, a token) as
// files, and a file keeps them out of the process's environment. A value
// read from a file is never echoed in an error.
func (fs *flagSet) fromEnv(name string, v flag.Value) {
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
	fs.Var(v, name, usage+" (env "+envName(name)+")")
	return p
}

// Secret is a string flag, read from its variable too, whose value is
// never shown: not as a default in the usage text, nor anywhere else.
func (fs *flagSet) Secret(name, usage string) *string {
	v := &secretValue{}
	fs.fromEnv(name, v)
	fs.Var(v, name, usage+" (env "+envName(name)+")")
	return &v.s
}

type secretValue struct{ s string }

func (v *secretValue) Set(s string) error { v.s = s; return nil }
func (v *secretValue) String() string     { return "" }

func (fs *flagSet) Duration(name string, def time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	*p = def
	v := (*durationValue)(p)
	fs.fromEnv(name, v)
	fs.Var(v, name, usage+" (env "+envName(name)+")")
	return p
}

func (fs *flagSet) Int64(name string, def int64, usage string) *int64 {
	p := new(int64)
	*p = def
	v := (*int64Value)(p)
	fs.fromEnv(name, v)
	fs.Var(v, name, usage+" (env "+envName(name)+")")
	return p
}

// Bool is a flag given alone (--flag) or with a value (--flag=false); its
// variable takes true, false, 1 or 0.
func (fs *flagSet) Bool(name string, def bool, usage string) *bool {
	p := new(bool)
	*p = def
	v := (*boolValue)(p)
	fs.fromEnv(name, v)
	fs.Var(v, name, usage+" (env "+envName(name)+")")
	return p
}

// parse parses args, allowing flags after positional arguments, and returns
// the positional ones. -h or --help prints the usage on stdout and returns
// errHelp.
func (fs *flagSet) parse(args []string) ([]string, error) {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(fs.stdout)
			fs.Usage()
			return nil, errHelp
		}
	}
	var positional []string
	args, negatives := fs.takeNegativeNumbers(args)
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError(err.Error())
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
	return append(negatives, positional...), nil
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

type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (examples: 500ms, 10s, 2m)")
	}
	if d <= 0 {
		return errors.New("must be positive")
	}
	*v = durationValue(d)
	return nil
}
func (v *durationValue) String() string { return time.Duration(*v).String() }

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
// this command reads, so a misspelt one (PLANTSTORE_ADRR) stops the start
// instead of being silently ignored. alsoKnown are variables other
// commands read, which may well be set in the same environment;
// PLANTSTORE_TEST_ is the test suites'.
func (fs *flagSet) checkVariables(environ []string, alsoKnown ...string) error {
	known := map[string]bool{}
	for _, name := range alsoKnown {
		known[name], known[name+"_FILE"] = true, true
	}
	fs.VisitAll(func(f *flag.Flag) {
		known[envName(f.Name)], known[envName(f.Name)+"_FILE"] = true, true
	})
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PLANTSTORE_") && !strings.HasPrefix(name, "PLANTSTORE_TEST_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		return usageError(fmt.Sprintf("unknown configuration variable %s: no flag reads it (see --help for the variables)", strings.Join(unknown, ", ")))
	}
	return nil
}
