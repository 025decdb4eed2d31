package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/plantstore/plantstore"
)

const tokenUsage = `Usage: plantstore token create|list|revoke [flags]

Issues, shows and revokes the access tokens of the store at --db.
  token create --name NAME [--scope plants:read,plants:write] [--replace]
  token list [--all] [--json]
  token revoke NAME
Run "plantstore token SUBCOMMAND --help" for its flags.
`

func runToken(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("token needs a subcommand: create, list or revoke")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, tokenUsage)
		return errHelp
	case "create":
		return tokenCreate(ctx, args[1:], getenv, stdout, stderr)
	case "list":
		return tokenList(ctx, args[1:], getenv, stdout, stderr)
	case "revoke":
		return tokenRevoke(ctx, args[1:], getenv, stdout, stderr)
	}
	return usageError(fmt.Sprintf("unknown token subcommand %q: want create, list or revoke", args[0]))
}

// tokenCreate prints the new token alone on stdout, so that
// TOKEN=$(plantstore token create --name x) captures it; the note that it
// is shown only once goes to stderr. It may make the store, and says so.
func tokenCreate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token create", `token create --name NAME [--scope SCOPES] [--replace] [--db PATH]

Issues a token and prints it alone on standard output, once; only its
SHA-256 is stored. With standard output closed or on /dev/null it makes
nothing and exits 1: a token no one saw would be left active. Scopes:
plants:read (list and read plants), plants:write (create, update and
delete them). Makes the store at --db if there is none, and says so on
standard error.`, getenv, stdout, stderr)
	db := addDBFlags(fs)
	name := fs.FlagSet.String("name", "", "the token's `NAME`, unique among active tokens (required)")
	scopeList := fs.FlagSet.String("scope", strings.Join(plantstore.KnownScopes, ","), "comma-separated `SCOPES`")
	replace := fs.FlagSet.Bool("replace", false, "if an active token has this name, revoke it and issue the new one in its place (its clients stop working)")
	if rest, err := fs.parse(args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError(fmt.Sprintf("token create takes no arguments, got %q; use --name", rest))
	}
	if *name == "" {
		return usageError("token create needs --name")
	}
	if err := plantstore.ValidateTokenName(*name); err != nil {
		return usageError(plantstore.ErrorMessage(err))
	}
	scopes, err := plantstore.ParseScopes(*scopeList)
	if err != nil {
		return usageError(plantstore.ErrorMessage(err))
	}
	if err := canShowSecret(stdout); err != nil {
		return err
	}
	store, err := db.create(ctx, stderr)
	if err != nil {
		return err
	}
	defer store.Close()

	secret := plantstore.NewToken()
	token := plantstore.Token{Name: *name, Scopes: scopes}
	_, err = store.CreateToken(ctx, token, plantstore.HashToken(secret))
	switch conflict := plantstore.ErrorCode(err) == plantstore.ECONFLICT; {
	case conflict && *replace:
		if err := replaceToken(ctx, store, token, secret, stdout, stderr); err != nil {
			return err
		}
	case conflict:
		return fmt.Errorf("an active token is already named %s: add --replace to revoke it and issue a new one, or choose another --name (plantstore token list shows the names)", quoteCell(*name))
	case err != nil:
		return cliError(err)
	default:
		if _, werr := fmt.Fprintln(stdout, secret); werr != nil {
			// A token no one saw is of no use, and it would stay active:
			// revoke it at once.
			if err := store.RevokeToken(ctx, *name, time.Now()); err != nil {
				return fmt.Errorf("the token could not be written to standard output (%v), and revoking it failed (%v): revoke %s with plantstore token revoke", werr, cliError(err), quoteCell(*name))
			}
			return fmt.Errorf("the token could not be written to standard output (%v), so it was revoked at once; run token create again with standard output where it can be written", werr)
		}
	}
	fmt.Fprintf(stderr, "created token %s with scopes %s; it is shown only this once\n", quoteCell(*name), strings.Join(scopes, ","))
	return nil
}

// replaceToken revokes the active token of token.Name and issues secret
// in its place, in one transaction. The secret is shown first: when it
// cannot be written, nothing has changed and the old token still works,
// where revoking first would leave the name with no token anyone can use.
// When the store then fails, the secret shown was never issued and the
// old token still works, and the error says so.
func replaceToken(ctx context.Context, store plantstore.TokenStore, token plantstore.Token, secret string, stdout, stderr io.Writer) error {
	if _, werr := fmt.Fprintln(stdout, secret); werr != nil {
		return fmt.Errorf("the token could not be written to standard output (%v), so nothing was changed: the token %s still works; run token create again with standard output where it can be written", werr, quoteCell(token.Name))
	}
	_, replaced, err := store.ReplaceToken(ctx, token, plantstore.HashToken(secret))
	if plantstore.ErrorCode(err) == plantstore.EUNAVAILABLE || ctx.Err() != nil {
		// The connection may have broken, or the command been cut
		// short, after the commit went out.
		return fmt.Errorf("the token printed may not have been issued, nor the old one revoked: see plantstore token list (its created time): %w", cliError(err))
	}
	if err != nil {
		return fmt.Errorf("the token printed was not issued, and nothing was revoked: %w", cliError(err))
	}
	if replaced {
		fmt.Fprintf(stderr, "revoked the token %s it replaces; running servers refuse it within 2 seconds\n", quoteCell(token.Name))
	} else {
		fmt.Fprintf(stderr, "no active token was named %s: nothing to revoke\n", quoteCell(token.Name))
	}
	return nil
}

// tokenJSON is a token as token list --json shows it: never a secret or
// a hash.
type tokenJSON struct {
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

func tokenList(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token list", `token list [--all] [--json] [--db PATH]

Shows each token's name, scopes, creation and last use; never a secret.`, getenv, stdout, stderr)
	db := addDBFlags(fs)
	all := fs.FlagSet.Bool("all", false, "include revoked tokens")
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	if rest, err := fs.parse(args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError(fmt.Sprintf("token list takes no arguments, got %q", rest))
	}
	store, err := db.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	tokens, err := store.ListTokens(ctx, *all)
	if err != nil {
		return cliError(err)
	}
	if *asJSON {
		out := make([]tokenJSON, 0, len(tokens))
		for _, t := range tokens {
			out = append(out, tokenJSON{Name: t.Name, Scopes: t.Scopes, CreatedAt: t.CreatedAt.UTC(),
				LastUsedAt: timeOrNull(t.LastUsedAt), RevokedAt: timeOrNull(t.RevokedAt)})
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	header := []string{"NAME", "SCOPES", "CREATED", "LAST USED"}
	if *all {
		header = append(header, "REVOKED")
	}
	table := newTable(stdout, header...)
	for _, t := range tokens {
		row := []string{tableCell(t.Name), strings.Join(t.Scopes, ","), timeOrNever(t.CreatedAt), timeOrNever(t.LastUsedAt)}
		if *all {
			row = append(row, timeOrNever(t.RevokedAt))
		}
		table.add(row...)
	}
	return table.flush()
}

func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func tokenRevoke(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token revoke", `token revoke NAME [--db PATH]

Revokes the active token called NAME. Running servers refuse it within
seconds.`, getenv, stdout, stderr)
	db := addDBFlags(fs)
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError("token revoke takes exactly one argument: the token's name")
	}
	store, err := db.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.RevokeToken(ctx, rest[0], time.Now()); err != nil {
		return cliError(err)
	}
	fmt.Fprintf(stderr, "revoked token %s; running servers refuse it within 2 seconds\n", quoteCell(rest[0]))
	return nil
}

// cliError shows a domain error's message, keeping the cause for
// unexpected ones.
func cliError(err error) error {
	switch plantstore.ErrorCode(err) {
	case plantstore.ENOTFOUND, plantstore.ECONFLICT, plantstore.EINVALID:
		return fmt.Errorf("%s", plantstore.ErrorMessage(err))
	}
	return err
}

func timeOrNever(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// canShowSecret says whether stdout can show a secret, before one is
// made: not if it is /dev/null, where Go puts a standard output that was
// closed. It also has a write to a pipe whose reader is gone fail
// (brokenPipeFails), so that the secret's command can undo what it made.
func canShowSecret(stdout io.Writer) error {
	brokenPipeFails()
	f, ok := stdout.(*os.File)
	if !ok {
		return nil
	}
	out, err := f.Stat()
	if err != nil {
		return nil // the write will tell
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(out, null) {
		return errors.New("standard output is " + os.DevNull + " (or was closed): the secret would be shown to no one, so nothing was made; run it again with standard output where it can be read")
	}
	return nil
}

// brokenPipeFails makes a write to a pipe whose reader is gone fail with
// EPIPE, for the rest of the process, rather than raise SIGPIPE, which
// kills a Go program writing to its standard output before it can act on
// the failure. Only the commands that print a secret ask for it, and
// serve, whose log may outlive its reader: the others, piped into head,
// should end quietly as filters do.
func brokenPipeFails() { signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) }
