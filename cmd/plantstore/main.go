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
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
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

const usage = `plantstore serves the Plant Store API.

Usage:
  plantstore serve [flags]                        run the HTTP server
  plantstore token create --name NAME [--scope S] issue a token; prints it alone on stdout
  plantstore token list [--all]                   show tokens (never the secrets)
  plantstore token revoke NAME                    revoke the active token called NAME

Every command takes --db PATH (env PLANTSTORE_DB, default ./plantstore.db).
Run "plantstore COMMAND -h" for a command's flags.
`

// run is the whole program, with its surroundings passed in so tests can
// run it in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsageShown
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], getenv, stderr)
	case "token":
		return runToken(ctx, args[1:], getenv, stdout, stderr)
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
