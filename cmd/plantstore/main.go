// Command plantstore serves the Plant Store API and manages its access
// tokens.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/plantstore/plantstore/internal/redact"
)

func main() {
	// The first SIGINT or SIGTERM asks for a graceful stop. A SIGINT after
	// it (Ctrl-C again) stops the process at once, as SIGKILL would: what
	// was answered 200 stays. A repeated SIGTERM still waits for the
	// drain: supervisors may send it more than once, and send SIGKILL when
	// they are done waiting. SIGHUP (the terminal closed; a supervisor or
	// log rotation that means "reload", which serve has nothing to) stops
	// gracefully too, rather than killing the process outright, Go's
	// default; unless it was ignored at start (nohup), as it stays.
	ignoredAtStart := signal.Ignored(os.Interrupt) // before Notify changes it
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	if !signal.Ignored(syscall.SIGHUP) {
		signal.Notify(signals, syscall.SIGHUP)
	}
	ctx, stop := context.WithCancelCause(context.Background())
	var stoppedBy atomic.Value // the first signal, once it came
	go func() {
		sig := <-signals
		stoppedBy.Store(sig)
		stop(signalled{sig})
		for sig := range signals {
			if sig == os.Interrupt {
				interruptedAgain(ignoredAtStart)
			}
		}
	}()
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)
	stop(nil)
	if errors.Is(err, errHelp) {
		err = nil
	}
	if err != nil {
		if !errors.Is(err, errUsageShown) {
			// Errors may quote a server, a file or a variable: nothing
			// in them may drive the terminal (line breaks and tabs of
			// multi-line causes aside).
			fmt.Fprintln(os.Stderr, "plantstore:", terminalText(err.Error(), "\n\t"))
		}
		if _, ok := errors.AsType[usageError](err); ok || errors.Is(err, errUsageShown) {
			os.Exit(2)
		}
		// A command a signal cut short (Ctrl-C, say) exits as a shell
		// reports a process that signal ended: 128 + its number (130 for
		// SIGINT), so a script can tell it from a failure.
		if _, cut := errors.AsType[interrupted](err); cut {
			if sig, ok := stoppedBy.Load().(syscall.Signal); ok { // set before ctx ended
				os.Exit(128 + int(sig))
			}
		}
		os.Exit(1)
	}
}

// signalled is the cause of the context of a command a signal stopped,
// which serve logs (app.StopCause: "cause":"interrupted by SIGTERM"). It
// is context.Canceled to errors.Is, as the commands look for; and since
// some callees return a context's cause as their error (net/http does),
// its text reads as an interruption in a message too.
type signalled struct{ sig os.Signal }

func (signalled) Unwrap() error { return context.Canceled }

func (s signalled) Error() string {
	name := s.sig.String()
	switch s.sig {
	case os.Interrupt:
		name = "SIGINT"
	case syscall.SIGTERM:
		name = "SIGTERM"
	case syscall.SIGHUP:
		name = "SIGHUP"
	}
	return "interrupted by " + name
}

// interruptedAgain ends the process at once: by SIGINT itself, as a shell
// expects of Ctrl-C, or, when SIGINT was ignored at start (a background
// job of a script, nohup), which signal.Reset would bring back, by exit
// status 130, a shell's for a process SIGINT ended.
func interruptedAgain(ignoredAtStart bool) {
	if !ignoredAtStart {
		signal.Reset(os.Interrupt)
		if self, err := os.FindProcess(os.Getpid()); err == nil && self.Signal(os.Interrupt) == nil {
			time.Sleep(time.Second) // it ends the process meanwhile
		}
	}
	os.Exit(130)
}

const usage = `plantstore serves the Plant Store API, and is its command line.

Usage:
  plantstore serve [flags]                          run the HTTP server (creates the store if there is none)
  plantstore token create --name NAME [--replace]   issue a token; prints it alone on stdout
  plantstore token list [--all] [--json]            show tokens (never the secrets)
  plantstore token revoke NAME                      revoke the active token called NAME
  plantstore webhook add URL [--events TYPES]       subscribe URL to new plants (or TYPES); prints its signing secret
  plantstore webhook list [--json]                  show subscribers and their deliveries (never the secrets)
  plantstore webhook remove ID                      unsubscribe
  plantstore webhook retry ID...                    send parked deliveries again
  plantstore backup --to FILE                       copy the SQLite store, while it serves
  plantstore restore --from FILE [--force]          replace the SQLite store with a backup; stop serve first
  plantstore plants add --id ID --name NAME [--tag TAG]
  plantstore plants list [--tag TAG] [--limit N] [--after ID] [--all]
  plantstore plants get ID
  plantstore plants update ID [--name NAME] [--tag TAG | --no-tag]
  plantstore plants delete ID
  plantstore events [--follow] [--json]             print the change feed of a running server
  plantstore health [--path /readyz]                exit 0 if the server on --addr answers 200
  plantstore version [--json]                       print the version and the commit (deploy/build.sh adds the build date)

serve, token, webhook, backup and restore work on the store itself: --db PATH
(env PLANTSTORE_DB, default ./plantstore.db). Only serve and token create
make a new store; the others need one.
plants talks to a running server: --server URL (env PLANTSTORE_SERVER,
default http://127.0.0.1:8080) and --token TOKEN (env PLANTSTORE_TOKEN);
it prints a table, or JSON with --json.

Run "plantstore COMMAND --help" for a command's flags.
`

// command is one of plantstore's commands. subcommands are the words
// that may follow its name, for those that have some.
type command struct {
	name        string
	subcommands []string
	run         func(ctx context.Context, args []string, env environment, stdout, stderr io.Writer) error
}

// commands is every command: the dispatch, the "did you mean" of a
// mistyped name, and the variables serve knows (knownVariables) all come
// from it. (A function, as serve's knownVariables reads it in turn.)
func commands() []command {
	return []command{
		{"serve", nil, runServe},
		{"token", []string{"create", "list", "revoke"}, getenvOnly(runToken)},
		{"webhook", []string{"add", "list", "remove", "retry"}, getenvOnly(runWebhook)},
		{"plants", sortedKeys(plantCommands), getenvOnly(runPlants)},
		{"events", nil, getenvOnly(runEvents)},
		{"backup", nil, getenvOnly(runBackup)},
		{"restore", nil, getenvOnly(runRestore)},
		{"health", nil, getenvOnly(runHealth)},
		{"version", nil, getenvOnly(runVersion)},
	}
}

// getenvOnly adapts a command that reads the environment only through
// its flags.
func getenvOnly(run func(context.Context, []string, func(string) string, io.Writer, io.Writer) error) func(context.Context, []string, environment, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, env environment, stdout, stderr io.Writer) error {
		return run(ctx, args, env.getenv, stdout, stderr)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// run is the whole program, with its surroundings passed in so tests can
// run it in-process: environ is the environment ("NAME=value" each), the
// only one any command reads.
func run(ctx context.Context, args []string, environ []string, stdin io.Reader, stdout, stderr io.Writer) error {
	env := newEnvironment(environ)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsageShown
	}
	switch args[0] {
	case "--version":
		args = append([]string{"version"}, args[1:]...)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
			// "plantstore help serve" is "plantstore serve --help".
			args = []string{args[1], "--help"}
			break
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	all := commands()
	i := slices.IndexFunc(all, func(c command) bool { return c.name == args[0] })
	if i < 0 {
		return usageError(fmt.Sprintf("unknown command %q%s\nRun \"plantstore --help\" for the commands.",
			args[0], didYouMean(args[0], commandNames(all), "")))
	}
	cmd := all[i]
	var err error
	// A mistyped subcommand gets the same one-line answer from every
	// command; the commands themselves handle a missing one, and help.
	if len(cmd.subcommands) > 0 && len(args) > 1 && !strings.HasPrefix(args[1], "-") &&
		args[1] != "help" && !slices.Contains(cmd.subcommands, args[1]) {
		err = usageError(fmt.Sprintf("unknown %s subcommand %q%s; want %s",
			cmd.name, args[1], didYouMean(args[1], cmd.subcommands, ""), orList(cmd.subcommands)))
	} else {
		err = cmd.run(ctx, args[1:], env, stdout, stderr)
	}
	// Every usage mistake ends with where to read the usage, added here
	// alone: the commands' messages (a mistyped flag, a required one, a
	// missing argument) say only what is wrong.
	err = withVariableNamed(err, args[1:], env)
	if ue, ok := err.(usageError); ok {
		name := cmd.name
		if len(args) > 1 && slices.Contains(cmd.subcommands, args[1]) {
			name += " " + args[1]
		}
		err = usageError(fmt.Sprintf("%s\nRun \"plantstore %s --help\" for its usage.", ue, name))
	}
	err = withoutFileValues(err, env)
	// A signal is how serve and events --follow are stopped: they end
	// without error, and serve's failure to stop cleanly is a failure.
	// Any other command that fails once ctx is cancelled was cut short.
	if err != nil && ctx.Err() != nil && cmd.name != "serve" {
		err = interrupted{err}
	}
	return err
}

// withVariableNamed names the variable a usage error's flag was read
// from, when its message begins with the flag ("--max-body-bytes 0: want
// 1 or more") and the command line did not give it: a mistake in a
// deployment's environment is then looked for where it is. A message
// that names a variable already is left as it is.
func withVariableNamed(err error, args []string, env environment) error {
	ue, ok := err.(usageError)
	msg := string(ue)
	if !ok || !strings.HasPrefix(msg, "--") || strings.Contains(msg, "PLANTSTORE_") {
		return err
	}
	name := msg[2:]
	if end := strings.IndexAny(name, " :=("); end >= 0 {
		name = name[:end]
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a = strings.TrimLeft(a, "-"); a == name || strings.HasPrefix(a, name+"=") {
			return err
		}
	}
	for _, v := range []string{envName(name), envName(name) + "_FILE"} {
		if env.vars[v] != "" {
			return usageError("--" + name + " (from " + v + ")" + msg[2+len(name):])
		}
	}
	return err
}

// interrupted is the error of a command that a signal cut short (run).
type interrupted struct{ error }

func (e interrupted) Unwrap() error { return e.error }

// withoutFileValues takes out of err's message each value a
// PLANTSTORE_..._FILE variable's file holds, as docs/configuration.md
// promises: such a value is a secret as often as not (a database URL, a
// token), and a command's check of a value (an address, a URL, a path)
// quotes it. The error keeps its kind (a usage error still exits 2).
func withoutFileValues(err error, env environment) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for name, file := range env.vars {
		if !strings.HasPrefix(name, "PLANTSTORE_") || !strings.HasSuffix(name, "_FILE") || file == "" {
			continue
		}
		b, rerr := os.ReadFile(file)
		if rerr != nil {
			continue
		}
		// As the flags read it: without the line end an editor adds.
		value := strings.TrimRight(string(b), "\r\n")
		for _, whole := range valueForms(value) {
			msg = redact.Replace(msg, whole, "<the value in "+name+">")
		}
		for _, part := range valueParts(value) {
			msg = redact.Replace(msg, part, "<part of the value in "+name+">")
		}
		for _, field := range namedParts(value) {
			msg = strings.ReplaceAll(msg, field.label+field.text+field.end, field.label+"<part of the value in "+name+">"+field.end)
		}
	}
	if msg == err.Error() {
		return err
	}
	return &fileValuesHidden{msg: msg, err: err}
}

// valueForms are the ways a message may quote a value whole: as it is,
// and a URL with a password as net/http's errors show it (the password
// "***") and as ours do (maskPassword).
func valueForms(value string) []string {
	forms := []string{value}
	// A relative path, as a message about the file shows it: absolute.
	if !strings.Contains(value, "://") && strings.ContainsAny(value, `/\`) && !filepath.IsAbs(value) {
		if abs, err := filepath.Abs(value); err == nil {
			forms = append(forms, abs)
		}
	}
	if u, err := url.Parse(value); err == nil {
		if _, has := u.User.Password(); has {
			// The stars as they are: url.UserPassword would escape them.
			masked := strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1)
			forms = append(forms, masked, maskPassword(value))
		}
	}
	return forms
}

// namedPart is a piece of a value that a message quotes after a label,
// and is taken out there only: taken out wherever it appears, a user or
// database named "plantstore" would garble every message.
type namedPart struct{ label, text, end string }

// namedParts are the pieces of a database URL pgx's errors name ("user=U
// database=D") and the server's own messages quote (password
// authentication failed for user "U", role "U" does not exist, database
// "D" does not exist).
func namedParts(value string) []namedPart {
	u, err := url.Parse(value)
	if err != nil || u.Host == "" {
		return nil
	}
	var parts []namedPart
	if name := u.User.Username(); name != "" {
		parts = append(parts, namedPart{"user=", name, ""}, namedPart{`user "`, name, `"`}, namedPart{`role "`, name, `"`})
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		parts = append(parts, namedPart{"database=", db, ""}, namedPart{`database "`, db, `"`})
	}
	return parts
}

// valueParts are the pieces of a value that a message may quote apart
// from the whole, longest first: a URL's host (a dial error names it), a
// path's directory (one that does not exist is named) and file name.
// redact.Replace takes a short one ("db") out only where it stands apart,
// not from every word that holds it; a piece of no letter or digit ("..")
// is left.
func valueParts(value string) []string {
	var parts []string
	if u, err := url.Parse(value); err == nil && u.Host != "" {
		parts = append(parts, u.Host, u.Hostname())
	} else if host, _, err := net.SplitHostPort(value); err == nil && host != "" {
		parts = append(parts, host) // a listen address: a lookup error names its host
	} else if strings.ContainsAny(value, `/\`) {
		if dir := filepath.Dir(value); dir != "." && dir != string(filepath.Separator) {
			parts = append(parts, dir)
		}
		if abs, err := filepath.Abs(value); err == nil && !filepath.IsAbs(value) {
			parts = append(parts, filepath.Dir(abs)) // a relative path shown absolute
		}
		parts = append(parts, filepath.Base(value))
	}
	parts = slices.DeleteFunc(parts, func(p string) bool {
		return !strings.ContainsFunc(p, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) || anyMachine(p)
	})
	slices.SortStableFunc(parts, func(a, b string) int { return len(b) - len(a) })
	return parts
}

// anyMachine says whether host names this machine or every address
// (localhost, 127.0.0.1, ::1, 0.0.0.0): no secret, and the words of the
// messages' own examples ("such as 127.0.0.1:8080"), which taking it out
// would garble.
func anyMachine(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}

type fileValuesHidden struct {
	msg string
	err error
}

func (e *fileValuesHidden) Error() string { return e.msg }
func (e *fileValuesHidden) Unwrap() error { return e.err }

func commandNames(all []command) []string {
	names := make([]string, len(all))
	for i, c := range all {
		names[i] = c.name
	}
	return names
}

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// usageError is a mistake in the command line; the process exits 2.
type usageError string

func (e usageError) Error() string { return string(e) }

// errUsageShown means the usage text was printed already (exit 2, nothing
// more to say).
var errUsageShown = errors.New("usage shown")

// errHelp means help was asked for and printed (exit 0).
var errHelp = errors.New("help shown")

// environment is a process environment: the variables as a list, which
// serve checks for names no flag reads, and a lookup.
type environment struct {
	environ []string
	vars    map[string]string
	// read, when set, hears every name looked up: knownVariables learns
	// what each command reads from it.
	read func(name string)
}

func newEnvironment(environ []string) environment {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		if name, value, ok := strings.Cut(kv, "="); ok {
			vars[name] = value
		}
	}
	return environment{environ: environ, vars: vars}
}

func (e environment) getenv(name string) string {
	if e.read != nil {
		e.read(name)
	}
	return e.vars[name]
}

// variables is what the commands read from the environment: every
// variable some flag of some command reads (with its _FILE form), and
// the variables named after flags that are read from the command line
// only, with those flags' names.
type variables struct {
	read            map[string]bool
	commandLineOnly map[string]string // PLANTSTORE_ALL: "--all"
}

// knownVariables asks every command's flags, as --help declares them,
// which variables they read: so serve, which refuses unknown ones, never
// refuses a variable another command documents, however the commands
// change.
func knownVariables() variables {
	v := variables{read: map[string]bool{}, commandLineOnly: map[string]string{}}
	env := newEnvironment(nil)
	env.read = func(name string) { v.read[name] = true }
	var help bytes.Buffer
	var flags []string
	for _, c := range commands() {
		subs := c.subcommands
		if len(subs) == 0 {
			subs = []string{""}
		}
		for _, sub := range subs {
			args := []string{"--help"}
			if sub != "" {
				args = []string{sub, "--help"}
			}
			help.Reset()
			c.run(context.Background(), args, env, &help, io.Discard)
			flags = append(flags, helpFlagNames(help.String())...)
		}
	}
	// A flag that one command reads from a variable and another from the
	// command line only (none today) counts as read.
	for _, name := range flags {
		if !v.read[envName(name)] {
			v.commandLineOnly[envName(name)] = "--" + name
		}
	}
	return v
}
