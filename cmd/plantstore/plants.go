package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/plantstore/plantstore/client"
)

const plantsUsage = `Usage: plantstore plants add|list|get|update|delete [flags]

Works with the plants of a running server, through its API.
  plants add --id ID --name NAME [--tag TAG]
  plants list [--tag TAG] [--limit N] [--after ID] [--all]
  plants get ID
  plants update ID --name NAME [--tag TAG]
  plants delete ID
Each takes --server URL (env PLANTSTORE_SERVER), --token TOKEN (env
PLANTSTORE_TOKEN) and --json. Run "plantstore plants SUBCOMMAND --help"
for its flags.
`

func runPlants(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, plantsUsage)
		return errUsageShown
	}
	cmd, ok := plantCommands[args[0]]
	if !ok {
		if h := args[0]; h == "-h" || h == "-help" || h == "--help" || h == "help" {
			fmt.Fprint(stdout, plantsUsage)
			return errHelp
		}
		return usageError(fmt.Sprintf("unknown plants subcommand %q: want add, list, get, update or delete", args[0]))
	}
	fs := newFlagSet("plants "+args[0], cmd.usage, getenv, stdout, stderr)
	server := fs.String("server", "http://127.0.0.1:8080", "base `URL` of the plantstore server")
	token := fs.Secret("token", "access `TOKEN`")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	run := cmd.flags(fs)
	positional, err := fs.parse(args[1:])
	if err != nil {
		return err
	}
	if *token == "" {
		return usageError("no token: pass --token or set PLANTSTORE_TOKEN (plantstore token create makes one)")
	}
	c, err := client.New(*server, *token)
	if err != nil {
		return usageError(strings.TrimPrefix(err.Error(), "plantstore: "))
	}
	out := plantPrinter{w: stdout, json: *asJSON}
	return apiError(run(ctx, c, positional, out, stderr), *server)
}

// A plantCommand declares its flags on fs and returns what runs it.
type plantCommand struct {
	usage string
	flags func(fs *flagSet) func(ctx context.Context, c *client.Client, args []string, out plantPrinter, stderr io.Writer) error
}

var plantCommands = map[string]plantCommand{
	"add": {`plants add --id ID --name NAME [--tag TAG]

Creates a plant with the id you choose. Adding the same plant again
succeeds and changes nothing; another plant under the id is a conflict.`,
		func(fs *flagSet) func(context.Context, *client.Client, []string, plantPrinter, io.Writer) error {
			id := fs.FlagSet.String("id", "", "the plant's `ID`, an integer (required)")
			name := fs.FlagSet.String("name", "", "the plant's `NAME`, 1 to 200 characters (required)")
			tag := optionalString(fs, "tag", "the plant's `TAG`, up to 100 characters")
			return func(ctx context.Context, c *client.Client, args []string, out plantPrinter, _ io.Writer) error {
				if err := noArguments("plants add", args); err != nil {
					return err
				}
				n, err := requiredID("--id", *id)
				if err != nil {
					return err
				}
				if *name == "" {
					return usageError("plants add needs --name")
				}
				p, err := c.Create(ctx, client.Plant{ID: n, Name: *name, Tag: tag.value()})
				if err != nil {
					return err
				}
				return out.one(p)
			}
		}},
	"list": {`plants list [--tag TAG] [--limit N] [--after ID] [--all]

Lists plants in id order, one page (--limit, default 100), or every page
with --all. When more plants follow a page, a note on standard error says
which --after shows the next one.`,
		func(fs *flagSet) func(context.Context, *client.Client, []string, plantPrinter, io.Writer) error {
			tag := optionalString(fs, "tag", "only plants with exactly this `TAG`")
			limit := fs.FlagSet.Int("limit", 0, "`N` plants per page, 1 to 1000 (0: the server's default, 100)")
			after := fs.FlagSet.String("after", "", "only plants with an id greater than `ID`")
			all := fs.Bool("all", false, "list every page")
			return func(ctx context.Context, c *client.Client, args []string, out plantPrinter, stderr io.Writer) error {
				if err := noArguments("plants list", args); err != nil {
					return err
				}
				opts := client.ListOptions{Limit: *limit, Tag: tag.value()}
				if *after != "" {
					n, err := requiredID("--after", *after)
					if err != nil {
						return err
					}
					opts.After = &n
				}
				if *all {
					var plants []client.Plant
					for p, err := range c.All(ctx, opts) {
						if err != nil {
							return err
						}
						plants = append(plants, p)
					}
					return out.many(plants)
				}
				page, err := c.List(ctx, opts)
				if err != nil {
					return err
				}
				if err := out.many(page.Plants); err != nil {
					return err
				}
				if page.Next != "" {
					last := page.Plants[len(page.Plants)-1].ID
					fmt.Fprintf(stderr, "more plants follow: add --after %d for the next page, or --all for every page\n", last)
				}
				return nil
			}
		}},
	"get": {`plants get ID

Shows the plant with this id, and its ETag, which changes whenever the
plant does: give it to update or delete --if-match to change the plant
only if no one else has since.`,
		func(fs *flagSet) func(context.Context, *client.Client, []string, plantPrinter, io.Writer) error {
			return func(ctx context.Context, c *client.Client, args []string, out plantPrinter, _ io.Writer) error {
				id, err := oneID("plants get", args)
				if err != nil {
					return err
				}
				p, etag, err := c.GetETag(ctx, id)
				if err != nil {
					return err
				}
				return out.tagged(p, etag)
			}
		}},
	"update": {`plants update ID --name NAME [--tag TAG] [--if-match ETAG]

Replaces the name and tag of the plant with this id. Without --tag the
plant's tag is removed. With --if-match, only if the plant still has that
ETag (from plants get): otherwise nothing changes and the exit status is 1.`,
		func(fs *flagSet) func(context.Context, *client.Client, []string, plantPrinter, io.Writer) error {
			name := fs.FlagSet.String("name", "", "the new `NAME`, 1 to 200 characters (required)")
			tag := optionalString(fs, "tag", "the new `TAG`, up to 100 characters (left out: no tag)")
			ifMatch := fs.FlagSet.String("if-match", "", "change the plant only while it has this `ETAG` (from plants get; * : while it exists)")
			return func(ctx context.Context, c *client.Client, args []string, out plantPrinter, _ io.Writer) error {
				id, err := oneID("plants update", args)
				if err != nil {
					return err
				}
				if *name == "" {
					return usageError("plants update needs --name")
				}
				p, etag, err := c.UpdateIf(ctx, client.Plant{ID: id, Name: *name, Tag: tag.value()}, *ifMatch)
				if err != nil {
					return err
				}
				return out.tagged(p, etag)
			}
		}},
	"delete": {`plants delete ID [--if-match ETAG]

Deletes the plant with this id; with --if-match, only while it still has
that ETag (from plants get).`,
		func(fs *flagSet) func(context.Context, *client.Client, []string, plantPrinter, io.Writer) error {
			ifMatch := fs.FlagSet.String("if-match", "", "delete the plant only while it has this `ETAG` (from plants get)")
			return func(ctx context.Context, c *client.Client, args []string, _ plantPrinter, stderr io.Writer) error {
				id, err := oneID("plants delete", args)
				if err != nil {
					return err
				}
				if err := c.DeleteIf(ctx, id, *ifMatch); err != nil {
					return err
				}
				fmt.Fprintf(stderr, "deleted plant %d\n", id)
				return nil
			}
		}},
}

// apiError shows the server's message for an answer it refused, and says
// plainly when the server could not be reached.
func apiError(err error, server string) error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*client.Error](err); ok {
		return fmt.Errorf("%s (HTTP %d)", e.Message, e.StatusCode)
	}
	if _, ok := errors.AsType[usageError](err); ok {
		return err
	}
	return fmt.Errorf("cannot reach the server at %s: %w", server, err)
}

// optional is a string flag that knows whether it was given, so an
// empty --tag "" differs from no --tag.
type optional struct {
	s   string
	set bool
}

func (o *optional) Set(s string) error { o.s, o.set = s, true; return nil }
func (o *optional) String() string     { return o.s }
func (o *optional) value() *string {
	if !o.set {
		return nil
	}
	return &o.s
}

func optionalString(fs *flagSet, name, usage string) *optional {
	o := &optional{}
	fs.Var(o, name, usage)
	return o
}

func requiredID(flag, s string) (int64, error) {
	if s == "" {
		return 0, usageError(flag + " is required")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, usageError(fmt.Sprintf("%s %q: want an integer", flag, s))
	}
	return n, nil
}

func oneID(cmd string, args []string) (int64, error) {
	if len(args) != 1 {
		return 0, usageError(cmd + " takes exactly one argument: the plant's id")
	}
	return requiredID("ID", args[0])
}

func noArguments(cmd string, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Sprintf("%s takes no arguments, got %q", cmd, args))
	}
	return nil
}

// plantPrinter writes plants as an aligned table, or as JSON.
type plantPrinter struct {
	w    io.Writer
	json bool
}

func (p plantPrinter) one(plant client.Plant) error {
	if p.json {
		return p.encode(plant)
	}
	return p.table([]client.Plant{plant})
}

// tagged writes one plant with its ETag: a column of the table, a member
// "etag" of the JSON.
func (p plantPrinter) tagged(plant client.Plant, etag string) error {
	if p.json {
		return p.encode(struct {
			client.Plant
			ETag string `json:"etag"`
		}{plant, etag})
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTAG\tETAG")
	fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", plant.ID, tableCell(plant.Name), tagCell(plant.Tag), etag)
	return tw.Flush()
}

func (p plantPrinter) many(plants []client.Plant) error {
	if p.json {
		if plants == nil {
			plants = []client.Plant{}
		}
		return p.encode(plants)
	}
	return p.table(plants)
}

func (p plantPrinter) encode(v any) error {
	enc := json.NewEncoder(p.w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func (p plantPrinter) table(plants []client.Plant) error {
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTAG")
	for _, plant := range plants {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", plant.ID, tableCell(plant.Name), tagCell(plant.Tag))
	}
	return tw.Flush()
}

// tagCell is a tag as a table shows it: "-" for none, quoted when it is
// empty, "-" itself or holds a space, so each reads unambiguously.
func tagCell(tag *string) string {
	if tag == nil {
		return "-"
	}
	if strings.ContainsAny(*tag, " ") || *tag == "" || *tag == "-" {
		return strconv.Quote(*tag)
	}
	return tableCell(*tag)
}

// tableCell is text from the server as a table shows it: as it is when
// every character is visible, else quoted with Go's escapes. The API
// accepts Unicode format characters in names and tags (it refuses only
// control characters), and on a terminal a bidi override (U+202E) or
// isolate (U+2066-U+2069) reorders the rest of the line, a zero-width
// character hides, and a line separator breaks the row, so a plant could
// pass for another or forge a row. Quoted, they show as \u202e. A plain
// cell never contains '"', so one that starts with '"' is always quoted
// and the two cannot be confused. JSON output is left as it is: there they
// are data, escaped or not by the reader's choice.
func tableCell(s string) string {
	for _, r := range s {
		if r == '"' || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
