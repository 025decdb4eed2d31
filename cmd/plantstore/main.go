// Command plantstore serves the Plant Store API and manages its access
// tokens.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, errHelp) {
		err = nil
	}
	if err != nil {
		if !errors.Is(err, errUsageShown) {
			fmt.Fprintln(os.Stderr, "plantstore:", err)
		}
		if _, ok := errors.AsType[usageError](err); ok || errors.Is(err, errUsageShown) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

const usage = `plantstore serves the Plant Store API, and is its command line.

Usage:
  plantstore serve [flags]                          run the HTTP server
  plantstore token create --name NAME [--scope S]   issue a token; prints it alone on stdout
  plantstore token list [--all]                     show tokens (never the secrets)
  plantstore token revoke NAME                      revoke the active token called NAME
  plantstore webhook add URL                        subscribe URL to new plants; prints its signing secret
  plantstore webhook list [--json]                  show subscribers and their deliveries (never the secrets)
  plantstore webhook remove ID                      unsubscribe
  plantstore backup --to FILE                       copy the SQLite store, while it serves
  plantstore restore --from FILE [--force]          replace the SQLite store with a backup; stop serve first
  plantstore plants add --id ID --name NAME [--tag TAG]
  plantstore plants list [--tag TAG] [--limit N] [--after ID] [--all]
  plantstore plants get ID
  plantstore plants update ID --name NAME [--tag TAG]
  plantstore plants delete ID
  plantstore health [--path /readyz]                exit 0 if the server on --addr answers 200
  plantstore version [--json]                       print the version, the commit and the build date

serve, token, webhook, backup and restore work on the store itself: --db PATH (env PLANTSTORE_DB,
default ./plantstore.db).
plants talks to a running server: --server URL (env PLANTSTORE_SERVER,
default http://127.0.0.1:8080) and --token TOKEN (env PLANTSTORE_TOKEN);
it prints a table, or JSON with --json.

Run "plantstore COMMAND --help" for a command's flags.
`

// run is the whole program, with its surroundings passed in so tests can
// run it in-process: environ is the environment ("NAME=value" each), the
// only one any command reads.
func run(ctx context.Context, args []string, environ []string, stdin io.Reader, stdout, stderr io.Writer) error {
	env := newEnvironment(environ)
	getenv := env.getenv
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsageShown
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], env, stdout, stderr)
	case "token":
		return runToken(ctx, args[1:], getenv, stdout, stderr)
	case "webhook":
		return runWebhook(ctx, args[1:], getenv, stdout, stderr)
	case "plants":
		return runPlants(ctx, args[1:], getenv, stdout, stderr)
	case "backup":
		return runBackup(ctx, args[1:], getenv, stdout, stderr)
	case "restore":
		return runRestore(ctx, args[1:], getenv, stdout, stderr)
	case "health":
		return runHealth(ctx, args[1:], getenv, stdout, stderr)
	case "version", "--version":
		return runVersion(ctx, args[1:], getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageError(fmt.Sprintf("unknown command %q", args[0]))
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

func (e environment) getenv(name string) string { return e.vars[name] }
