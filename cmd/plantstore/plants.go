package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/client"
)

const plantsUsage = `Usage: plantstore plants add|list|get|update|delete [flags]

Works with the plants of a running server, through its API.
  plants add --id ID --name NAME [--tag TAG]
  plants list [--tag TAG] [--limit N] [--after ID] [--all]
  plants get ID
  plants update ID [--name NAME] [--tag TAG | --no-tag]
  plants delete ID
Each takes --server URL (env PLANTSTORE_SERVER), --token TOKEN (env
PLANTSTORE_TOKEN), --ca-cert FILE (env PLANTSTORE_CA_CERT) and --json.
A request the server refuses for now (429, 503) or whose connection
drops is retried up to 3 times, as long as the server asks to wait at
most 10 s. Run "plantstore plants SUBCOMMAND --help" for its flags.
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
	api := addServerFlags(fs, "access `TOKEN`", timeoutUsage)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	run := cmd.flags(fs)
	positional, err := fs.parse(args[1:])
	if err != nil {
		return err
	}
	// A user waits: retry what the server refuses for now, but only while
	// it asks for short waits (the client's 10 s cap), and say how long
	// otherwise (apiError).
	c, err := api.client(client.WithRetries(plantRetries))
	if err != nil {
		return err
	}
	w := &outputWriter{w: stdout}
	return w.outcome(run(ctx, c, positional, plantPrinter{w: w, json: *asJSON}, stderr), api.server.String())
}

// outputWriter notes the first error writing to w.
type outputWriter struct {
	w   io.Writer
	err error
}

// failure says what failed when a write did: the server answered, and the
// failure is here, not to be taken for the server's (a change it made is
// made).
func (o *outputWriter) failure() error {
	if o.err == nil {
		return nil
	}
	return fmt.Errorf("the server's answer could not be written to standard output: %w", o.err)
}

// outcome is a command's error, err from talking to server, unless
// writing its output failed first.
func (o *outputWriter) outcome(err error, server string) error {
	if werr := o.failure(); werr != nil {
		return werr
	}
	return apiError(err, server)
}

func (o *outputWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil && o.err == nil {
		o.err = err
	}
	return n, err
}

// serverFlags are the flags of the commands that talk to a server over
// its API (plants, events).
type serverFlags struct {
	server        *serverValue
	token, caCert *string
	timeout       *time.Duration
}

// serverValue is the --server flag. Its URL may hold a password, which
// it masks where it is shown: in the usage text (where a value from
// PLANTSTORE_SERVER appears as the default) and in errors.
type serverValue struct{ raw string }

func (v *serverValue) Set(s string) error { v.raw = s; return nil }
func (v *serverValue) String() string {
	if v == nil {
		return ""
	}
	return maskPassword(v.raw)
}

// maskPassword is raw with the password of its user information, if it
// is a URL with one, replaced as url.URL.Redacted does. A value that is
// not a URL of that shape (it does not parse, or has no scheme and
// host: a stray quote or carriage return from an env file, a missing
// "http://") is shown in the error that says so: whatever stands before
// its last '@', after any "//", may be credentials, and is masked whole.
func maskPassword(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
		if _, has := u.User.Password(); has {
			return u.Redacted()
		}
		return raw
	}
	at := strings.LastIndexByte(raw, '@')
	if at < 0 {
		return raw
	}
	start := 0
	if i := strings.Index(raw[:at], "//"); i >= 0 {
		start = i + len("//")
	}
	return raw[:start] + "xxxxx" + raw[at:]
}

// timeoutUsage is --timeout's help for commands that send requests;
// streamTimeoutUsage adds what it means to a followed event stream.
const (
	timeoutUsage       = "how long each request may take, from sending it to the end of its answer"
	streamTimeoutUsage = timeoutUsage + "; a followed event stream is read again after 45 s without a word instead"
)

func addServerFlags(fs *flagSet, tokenUsage, timeoutHelp string) serverFlags {
	server := &serverValue{raw: "http://127.0.0.1:8080"}
	fs.fromEnv("server", server)
	fs.Var(server, "server", "base `URL` of the plantstore server")
	return serverFlags{
		server:  server,
		token:   fs.Secret("token", tokenUsage),
		caCert:  fs.String("ca-cert", "", "trust the certificates in this PEM `FILE` (a private CA) instead of the system's, for an https --server"),
		timeout: fs.Duration("timeout", defaultRequestTimeout, timeoutHelp),
	}
}

// client is the API client the flags name, with opts.
func (f serverFlags) client(opts ...client.Option) (*client.Client, error) {
	if *f.token == "" {
		return nil, usageError("no token: pass --token or set PLANTSTORE_TOKEN (plantstore token create makes one)")
	}
	if *f.caCert != "" {
		cfg, err := trustOnly(*f.caCert)
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.WithTLSConfig(cfg))
	}
	// No answer is waited for without end: a server that accepts and
	// never answers, or answers a byte at a time, would hang a script.
	// (A followed stream has a bound of its own: client.DefaultStreamSilence.)
	opts = append([]client.Option{client.WithHTTPClient(&http.Client{Timeout: *f.timeout})}, opts...)
	c, err := client.New(f.server.raw, *f.token, opts...)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "plantstore: ")
		if errors.Is(err, client.ErrToken) {
			return nil, usageError("--token (PLANTSTORE_TOKEN): " + msg)
		}
		// The client quotes the URL as %q does, escapes and all.
		msg = strings.ReplaceAll(msg, strconv.Quote(f.server.raw), strconv.Quote(f.server.String()))
		msg = strings.ReplaceAll(msg, f.server.raw, f.server.String())
		return nil, usageError("--server (PLANTSTORE_SERVER): " + msg)
	}
	return c, nil
}

// plantRetries is how many times the plants commands retry a request.
const plantRetries = 3

// defaultRequestTimeout bounds each request of the plants and events
// commands, from sending it to the end of its answer, unless --timeout
// says otherwise. The service answers within its --request-timeout (10 s
// by default), and a page of 1,000 plants is about 1.4 MB.
const defaultRequestTimeout = 30 * time.Second

// trustOnly is a TLS configuration that trusts the certificates of the
// PEM file at path and no others, as curl's --cacert does: a private CA
// is named so that the server is checked against it.
func trustOnly(path string) (*tls.Config, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError(fmt.Sprintf("--ca-cert: %v", err))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, usageError(fmt.Sprintf("--ca-cert %s: no PEM certificate in it", path))
	}
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
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
				if !fs.given("id") {
					return usageError("plants add needs --id")
				}
				n, err := requiredID("--id", *id)
				if err != nil {
					return err
				}
				if *name == "" {
					if fs.given("name") {
						return usageError("plants add --name: empty; a plant's name is 1 to 200 characters")
					}
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
				if *limit < 0 || *limit > plantstore.MaxListLimit {
					return usageError(fmt.Sprintf("--limit %d: want 1 to %d plants a page (0, or no --limit: the server's default, %d)",
						*limit, plantstore.MaxListLimit, plantstore.DefaultListLimit))
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
					return out.stream(c.All(ctx, opts))
				}
				page, err := c.List(ctx, opts)
				if err != nil {
					return err
				}
				if err := out.many(page.Plants); err != nil {
					return err
				}
				if page.Next != "" && len(page.Plants) > 0 {
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
	"update": {`plants update ID [--name NAME] [--tag TAG | --no-tag] [--if-match ETAG]

Changes the plant with this id: only what you give changes. --name
renames it, --tag sets its tag, --no-tag removes the tag; at least one.
Given a name and a tag (or --no-tag), it replaces the plant. Given only
one, it reads the plant and writes it back with that change, on the
condition that nobody changed it in between (If-Match with the ETag it
read), reading again if somebody did. With --if-match, only if the plant
still has that ETag (from plants get): otherwise nothing changes and the
exit status is 1.`,
		func(fs *flagSet) func(context.Context, *client.Client, []string, plantPrinter, io.Writer) error {
			name := optionalString(fs, "name", "the new `NAME`, 1 to 200 characters (left out: the name is kept)")
			tag := optionalString(fs, "tag", "the new `TAG`, up to 100 characters (left out: the tag is kept)")
			noTag := fs.FlagSet.Bool("no-tag", false, "remove the plant's tag")
			ifMatch := fs.FlagSet.String("if-match", "", "change the plant only while it has this `ETAG` (from plants get; * : while it exists)")
			return func(ctx context.Context, c *client.Client, args []string, out plantPrinter, _ io.Writer) error {
				id, err := oneID("plants update", args)
				if err != nil {
					return err
				}
				switch {
				case tag.set && *noTag:
					return usageError("plants update takes --tag or --no-tag, not both")
				case name.set && name.s == "":
					return usageError("plants update --name: empty; a plant's name is 1 to 200 characters")
				case !name.set && !tag.set && !*noTag:
					return usageError("plants update needs --name, --tag or --no-tag: what to change")
				}
				p, etag, err := updatePlant(ctx, c, id, name.s, tag.value(), *noTag, entityTag(*ifMatch))
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
				err = c.DeleteIf(ctx, id, entityTag(*ifMatch))
				// A retry's 404 after an attempt that may have taken
				// effect: the plant is gone, as asked, perhaps by that
				// attempt, whose answer was lost.
				if e, ok := errors.AsType[*client.Error](err); ok && e.StatusCode == http.StatusNotFound && e.EarlierMayHaveTakenEffect {
					fmt.Fprintf(stderr, "plant %d is gone: an earlier attempt, whose answer was lost, may have deleted it\n", id)
					return nil
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(stderr, "deleted plant %d\n", id)
				return nil
			}
		}},
}

// entityTag is --if-match's ETAG as If-Match needs it: quoted. A shell
// drops the quotes of an ETag copied from the table ("--if-match "x""
// passes x), and the server would take x for an ETag no plant has.
func entityTag(s string) string {
	if s == "" || s == "*" || strings.HasPrefix(s, `"`) || strings.HasPrefix(s, `W/"`) {
		return s
	}
	return `"` + s + `"`
}

// updateAttempts bounds the reads and writes of an update that changes
// one field, when other writers keep changing the plant in between.
const updateAttempts = 3

// updatePlant changes the plant id: its name unless name is "", its tag
// to tag when not nil, or removes it with noTag. Given both, it replaces
// the plant; else it reads the plant and writes it back changed, on the
// condition that it has not changed since (ifMatch, else the ETag read),
// and reads again when it has.
func updatePlant(ctx context.Context, c *client.Client, id int64, name string, tag *string, noTag bool, ifMatch string) (client.Plant, string, error) {
	if name != "" && (tag != nil || noTag) {
		return c.UpdateIf(ctx, client.Plant{ID: id, Name: name, Tag: tag}, ifMatch)
	}
	for attempt := 1; ; attempt++ {
		p, etag, err := c.GetETag(ctx, id)
		if err != nil {
			return client.Plant{}, "", err
		}
		if name != "" {
			p.Name = name
		}
		if tag != nil || noTag {
			p.Tag = tag
		}
		ours := ifMatch == "" || ifMatch == "*"
		if !ours {
			etag = ifMatch // the caller's condition: a 412 is theirs to see
		}
		p, etag, err = c.UpdateIf(ctx, p, etag)
		if client.StatusCode(err) != http.StatusPreconditionFailed || !ours || attempt == updateAttempts {
			return p, etag, err
		}
	}
}

// refusal words an answer the server refused: its message and status.
// When it asked to wait, its words point to the Retry-After header, which
// a user of the command does not see; apiError says the number instead.
func refusal(e *client.Error) string {
	msg := serverMessage(e.Message)
	if asksToWait(e) {
		msg = strings.TrimSuffix(msg, "; retry after the time in Retry-After")
	}
	if e.StatusCode >= 500 && e.RequestID != "" {
		// What the operator finds the cause under in the service's log.
		return fmt.Sprintf("%s (HTTP %d, request %s)", msg, e.StatusCode, serverMessage(e.RequestID))
	}
	return fmt.Sprintf("%s (HTTP %d)", msg, e.StatusCode)
}

// asksToWait says whether e is a 429 or 503 with a Retry-After.
func asksToWait(e *client.Error) bool {
	return e.RetryAfter > 0 && (e.StatusCode == http.StatusTooManyRequests || e.StatusCode == http.StatusServiceUnavailable)
}

// apiError shows the server's message for an answer it refused, and says
// plainly when the server could not be reached. When the server asked to
// wait (429, 503 with Retry-After) longer than the retries did, it says
// how long.
func apiError(err error, server string) error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*client.Error](err); ok {
		if asksToWait(e) {
			secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
			return fmt.Errorf("%s; retry after %d s", refusal(e), secs)
		}
		return errors.New(refusal(e))
	}
	if _, ok := errors.AsType[usageError](err); ok {
		return err
	}
	// Refusals of the client's own that the client words without the
	// server, which the user must know to act: it is the --server or
	// PLANTSTORE_SERVER in force, not necessarily the one in mind.
	// crypto/tls wraps every certificate that does not verify in a
	// *tls.CertificateVerificationError (trustOnly adds no check of its
	// own, which could return one bare).
	if cv, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		hint := "" // another name, expired: the address or the certificate must change
		if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
			hint = " (for a private CA, give its certificate with --ca-cert FILE)"
		}
		return fmt.Errorf("the certificate of the server at %s does not verify: %w%s", server, cv, hint)
	}
	if errors.Is(err, http.ErrSchemeMismatch) {
		return fmt.Errorf("the server at %s answered in plain HTTP, not HTTPS: use an http:// --server, or serve it over TLS", server)
	}
	if client.Permanent(err) {
		// Reached, but refused by the client itself (a redirect to
		// another origin, too many redirects): said as the client says
		// it, without net/http's "Get URL:" before.
		if u, ok := errors.AsType[*url.Error](err); ok {
			err = u.Err
		}
		return errors.New(strings.TrimPrefix(err.Error(), "plantstore: "))
	}
	// net/http's own errors (no connection, a broken one) come as
	// *url.Error. Anything else came after an answer: one that was cut
	// short, or not plantstore's (a --server that names another web
	// server answers HTML).
	// --timeout ran out: before the answer (a *url.Error) or while its
	// body came, slower than the timeout allows.
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return fmt.Errorf("the server at %s did not answer in time (--timeout): %w", server, err)
	}
	if _, ok := errors.AsType[*url.Error](err); ok {
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted before the server answered")
		}
		return fmt.Errorf("cannot reach the server at %s: %w", server, err)
	}
	// The answer began, then stopped: the command interrupted, or the
	// connection lost (after the client's retries, where it may retry).
	if errors.Is(err, context.Canceled) {
		return errors.New("interrupted before the whole answer came")
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("the connection to the server at %s broke before the whole answer came: %s", server, strings.TrimPrefix(err.Error(), "plantstore: "))
	}
	return fmt.Errorf("the server at %s answered, but not as plantstore does (does --server name a plantstore server?): %s", server, strings.TrimPrefix(err.Error(), "plantstore: "))
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
		return 0, usageError(flag + ": empty; want an integer")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, usageError(fmt.Sprintf("%s %q: out of range: a plant id is an int64, from %d to %d", flag, s, int64(math.MinInt64), int64(math.MaxInt64)))
	}
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
	t := newTable(p.w, "ID", "NAME", "TAG", "ETAG")
	t.add(strconv.FormatInt(plant.ID, 10), tableCell(plant.Name), tagCell(plant.Tag), terminalText(etag, ""))
	return t.flush()
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

// stream writes the plants of seq as many does, as they come rather than
// once all have: a listing of millions would otherwise be held whole in
// memory, and nothing shown until its end. The JSON is the same array,
// written element by element; the table is aligned by blocks of
// alignedRows, so one of fewer rows reads as many's. After an error, what
// came before it stays written, the JSON array unclosed.
func (p plantPrinter) stream(seq iter.Seq2[client.Plant, error]) error {
	if p.json {
		return p.streamJSON(seq)
	}
	t := newTable(p.w, "ID", "NAME", "TAG")
	rows := 0
	for plant, err := range seq {
		if err != nil {
			if rows > 0 { // a header alone would read as an empty listing
				t.flush()
			}
			return err
		}
		t.add(strconv.FormatInt(plant.ID, 10), tableCell(plant.Name), tagCell(plant.Tag))
		if rows++; rows%alignedRows == 0 {
			if err := t.flush(); err != nil {
				return err
			}
		}
	}
	return t.flush()
}

// alignedRows is how many rows of a streamed table are aligned together.
const alignedRows = 10_000

func (p plantPrinter) streamJSON(seq iter.Seq2[client.Plant, error]) error {
	var elem bytes.Buffer
	enc := json.NewEncoder(&elem)
	enc.SetIndent("  ", "  ")
	enc.SetEscapeHTML(false)
	first := true
	for plant, err := range seq {
		if err != nil {
			return err
		}
		elem.Reset()
		if first {
			elem.WriteString("[\n  ")
		} else {
			elem.WriteString(",\n  ")
		}
		if err := enc.Encode(plant); err != nil {
			return err
		}
		elem.Truncate(elem.Len() - 1) // Encode's newline: the comma goes there
		if _, err := p.w.Write(elem.Bytes()); err != nil {
			return err
		}
		first = false
	}
	end := "\n]\n"
	if first {
		end = "[]\n"
	}
	_, err := io.WriteString(p.w, end)
	return err
}

func (p plantPrinter) encode(v any) error {
	enc := json.NewEncoder(p.w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func (p plantPrinter) table(plants []client.Plant) error {
	t := newTable(p.w, "ID", "NAME", "TAG")
	for _, plant := range plants {
		t.add(strconv.FormatInt(plant.ID, 10), tableCell(plant.Name), tagCell(plant.Tag))
	}
	return t.flush()
}

// tagCell is a tag as a table shows it: "-" for none, quoted when it is
// empty, "-" itself or holds a space, so each reads unambiguously.
func tagCell(tag *string) string {
	if tag == nil {
		return "-"
	}
	if strings.ContainsAny(*tag, " ") || *tag == "" || *tag == "-" {
		return quoteCell(*tag)
	}
	return tableCell(*tag)
}

// tableCell is text from the server as a table shows it: as it is when
// every character is visible, else quoted, each invisible character
// escaped. The API accepts Unicode format characters in names and tags
// (it refuses only control characters), and on a terminal a bidi
// override (U+202E) or isolate (U+2066-U+2069) reorders the rest of the
// line, a zero-width character hides, and a line separator breaks the
// row, so a plant could pass for another or forge a row. Quoted, they
// show as \u202e. A space at either end would pass for the column's
// padding ("Fern " for "Fern"), so such a cell is quoted too. A plain
// cell never contains '"', so one that starts with '"' is always quoted
// and the two cannot be confused. JSON output is left as it is: there
// they are data, escaped or not by the reader's choice.
func tableCell(s string) string {
	if strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") {
		return quoteCell(s)
	}
	for _, r := range s {
		if r == '"' || hidden(r) {
			return quoteCell(s)
		}
	}
	return s
}

// hidden says whether r shows as nothing, or as something else, on a
// terminal: what Go does not call printable (controls, format characters,
// separators but the space), and the printable characters Unicode says
// a renderer may ignore (Default_Ignorable_Code_Point: the combining
// grapheme joiner U+034F, variation selectors such as U+FE0F, Hangul
// fillers such as U+3164) and the braille pattern blank U+2800, which
// strconv.Quote would leave as they are.
// An emoji's U+FE0F is escaped with the rest: harmless in a quoted cell.
func hidden(r rune) bool {
	return !unicode.IsPrint(r) || unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector) ||
		r == '\u2800' // the braille pattern blank: a symbol to Unicode, a space on screen
}

// terminalText is text for a terminal line, a server's or one that
// quotes a server's: each hidden character escaped as quoteCell escapes
// it, but for those in keep, and the quotes and backslashes left as they
// are. So an error message cannot clear the screen, retitle the window,
// reorder the line or forge another.
func terminalText(s, keep string) string {
	clean := utf8.ValidString(s)
	for _, r := range s {
		if hidden(r) && !strings.ContainsRune(keep, r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	writeEscaped(&b, s, keep, false)
	return b.String()
}

// writeEscaped writes s to b with Go's escapes for bytes that are not
// UTF-8 and for hidden characters but those in keep, and, when quoted,
// for '"' and '\\' too.
func writeEscaped(b *strings.Builder, s, keep string, quoted bool) {
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(b, `\x%02x`, s[0])
		case quoted && (r == '"' || r == '\\'):
			b.WriteByte('\\')
			b.WriteRune(r)
		case !hidden(r), strings.ContainsRune(keep, r):
			b.WriteString(s[:size])
		default:
			writeEscape(b, r)
		}
		s = s[size:]
	}
}

// writeEscape writes hidden rune r as Go would quote it.
func writeEscape(b *strings.Builder, r rune) {
	switch {
	case unicode.IsPrint(r) && r > 0xFFFF:
		fmt.Fprintf(b, `\U%08x`, r)
	case unicode.IsPrint(r):
		fmt.Fprintf(b, `\u%04x`, r)
	default:
		q := strconv.QuoteRune(r) // '\u202e', '\n'
		b.WriteString(q[1 : len(q)-1])
	}
}

// maxShownMessage bounds a server's message as the commands show it: the
// service's are a line, and one of megabytes is no message.
const maxShownMessage = 300

// serverMessage is a server's message as the commands show it: on one
// line, hidden characters escaped, at most maxShownMessage characters.
func serverMessage(msg string) string {
	if n := utf8.RuneCountInString(msg); n > maxShownMessage {
		msg = string([]rune(msg)[:maxShownMessage]) + fmt.Sprintf("… (%d characters more)", n-maxShownMessage)
	}
	return terminalText(msg, "")
}

// quoteCell is s between double quotes, with Go's escapes for '"', '\\',
// bytes that are not UTF-8 and hidden characters: what strconv.Quote
// makes of it, but for the printable hidden ones, which it leaves.
func quoteCell(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	writeEscaped(&b, s, "", true)
	b.WriteByte('"')
	return b.String()
}
