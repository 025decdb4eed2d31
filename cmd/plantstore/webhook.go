package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/webhook"
)

const webhookUsage = `Usage: plantstore webhook add|list|remove [flags]

Manages the subscribers that hear of every new plant, in the store at
--db. Each gets POST URL with the NewPlant as JSON, signed as Standard
Webhooks signs (webhook-id, webhook-timestamp, webhook-signature).
  webhook add URL        prints the new subscriber's signing secret, once
  webhook list [--json]  subscribers, their state, delivery counts and last
                         error; never secrets (URLs as scheme://host/…#hash
                         unless --full-urls)
  webhook remove ID      the subscriber and its pending deliveries
Run "plantstore webhook SUBCOMMAND --help" for its flags.
`

func runWebhook(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("webhook needs a subcommand: add, list or remove")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, webhookUsage)
		return errHelp
	case "add":
		return webhookAdd(ctx, args[1:], getenv, stdout, stderr)
	case "list":
		return webhookList(ctx, args[1:], getenv, stdout, stderr)
	case "remove":
		return webhookRemove(ctx, args[1:], getenv, stdout, stderr)
	}
	return usageError(fmt.Sprintf("unknown webhook subcommand %q: want add, list or remove", args[0]))
}

// webhookAdd prints the signing secret alone on stdout, so that
// SECRET=$(plantstore webhook add URL) captures it; the rest goes to stderr.
func webhookAdd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("webhook add", `webhook add URL [--db PATH]

Subscribes URL (http or https) to new plants and prints its signing secret
("whsec_" + base64) on stdout; it is shown only this once. Servers refuse
to deliver to loopback, private and link-local addresses unless they run
with --allow-private-webhooks, and to cloud metadata addresses unless they
run with --allow-metadata-webhooks: add warns when the URL's host is (or,
as this machine resolves it, resolves to) such an address, and adds it
all the same. Receivers verify each delivery's signature with the secret
(docs/webhooks.md).`, getenv, stdout, stderr)
	db := addDBFlags(fs)
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError("webhook add takes exactly one argument: the subscriber's URL")
	}
	if err := webhook.CheckURL(rest[0]); err != nil {
		return usageError(err.Error())
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return err
	}
	store, err := db.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	sub, err := store.AddSubscriber(ctx, rest[0], secret)
	if err != nil {
		return cliError(err)
	}
	fmt.Fprintln(stdout, secret)
	// Not the URL as typed: its path or query may hold the subscriber's
	// own secret, and terminal output ends up in CI logs and scrollback.
	fmt.Fprintf(stderr, "added webhook subscriber %d for %s; its signing secret is shown only this once\n", sub.ID, tableCell(webhook.RedactURL(sub.URL)))
	warnPrivate(ctx, sub.URL, stderr)
	return nil
}

// warnPrivate says on stderr when a subscriber's host is an address that
// serve refuses by default, so the operator learns it now rather than
// from webhook list after the first deliveries fail. Only a warning:
// the server may run with --allow-private-webhooks, or resolve the name
// otherwise than this machine does.
func warnPrivate(ctx context.Context, rawURL string, stderr io.Writer) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return // CheckURL has accepted it
	}
	host := u.Hostname()
	addrs := []netip.Addr{}
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, ip)
	} else {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if addrs, err = net.DefaultResolver.LookupNetIP(lctx, "ip", host); err != nil {
			fmt.Fprintf(stderr, "warning: %s does not resolve here (%v); deliveries fail until it does\n", tableCell(host), withoutHost(err))
			return
		}
	}
	for _, ip := range addrs {
		if err := webhook.CheckAddress(ip, webhook.ClientOptions{}); err != nil {
			resolves := ""
			if ip.String() != host {
				resolves = tableCell(host) + " resolves to " + ip.String() + ": "
			}
			fmt.Fprintf(stderr, "warning: %sdeliveries there are refused: %v\n", resolves, err)
			return
		}
	}
}

// withoutHost is a resolver's error without the name, which the warning
// already shows.
func withoutHost(err error) error {
	if dnsErr, ok := errors.AsType[*net.DNSError](err); ok {
		return errors.New(dnsErr.Err)
	}
	return err
}

func webhookList(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("webhook list", `webhook list [--json] [--db PATH]

Shows each subscriber: its URL; its state, "active" (its last attempt,
if any, was delivered), "failing" (its last attempt failed: the delivery
is retried, or was given up on) or "disabled" (it answered 410 Gone and
gets no events); its deliveries pending, delivered and failed (given up
after the retry schedule); and its last error with when it happened,
cleared by the next successful delivery. Never a signing secret. A URL
shows as its scheme and host and a hash of the rest
(https://hooks.slack.com/…#1a2b3c4d), as server logs show it, because
many subscribers carry a secret of their own in the path or query;
--full-urls shows them whole.`, getenv, stdout, stderr)
	db := addDBFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	// Command line only: a variable left in the environment must not make
	// every later listing print the subscribers' credentials.
	fullURLs := fs.FlagSet.Bool("full-urls", false, "show each URL whole, path and query included, which may hold the subscriber's credentials")
	if rest, err := fs.parse(args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError(fmt.Sprintf("webhook list takes no arguments, got %q", rest))
	}
	store, err := db.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	subs, err := store.Subscribers(ctx)
	if err != nil {
		return cliError(err)
	}
	shown := webhook.RedactURL
	if *fullURLs {
		shown = func(u string) string { return u }
	}
	if *asJSON {
		type subscriberJSON struct {
			ID             int64      `json:"id"`
			URL            string     `json:"url"`
			State          string     `json:"state"`
			CreatedAt      time.Time  `json:"created_at"`
			DisabledAt     *time.Time `json:"disabled_at,omitempty"`
			DisabledReason string     `json:"disabled_reason,omitempty"`
			Pending        int64      `json:"pending"`
			Delivered      int64      `json:"delivered"`
			Failed         int64      `json:"failed"`
			LastError      string     `json:"last_error,omitempty"`
			LastErrorAt    *time.Time `json:"last_error_at,omitempty"`
		}
		out := make([]subscriberJSON, 0, len(subs))
		for _, s := range subs {
			out = append(out, subscriberJSON{s.ID, shown(s.URL), s.State(), s.CreatedAt, s.DisabledAt, s.DisabledReason,
				s.Pending, s.Delivered, s.Failed, s.LastError, s.LastErrorAt})
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tURL\tSTATE\tPENDING\tDELIVERED\tFAILED\tCREATED\tLAST ERROR AT\tLAST ERROR")
	for _, s := range subs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", s.ID, tableCell(shown(s.URL)), s.State(),
			s.Pending, s.Delivered, s.Failed, timeOrNever(s.CreatedAt), lastErrorAt(s), tableCell(orDash(s.LastError)))
	}
	return tw.Flush()
}

// lastErrorAt is when the last error happened; for a subscriber disabled
// before the store kept that time, when it was disabled (the same moment).
func lastErrorAt(s plantstore.Subscriber) string {
	switch {
	case s.LastError == "":
		return "-"
	case s.LastErrorAt != nil:
		return timeOrNever(*s.LastErrorAt)
	case s.DisabledAt != nil:
		return timeOrNever(*s.DisabledAt)
	}
	return "-"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func webhookRemove(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("webhook remove", `webhook remove ID [--db PATH]

Removes the subscriber with ID (see webhook list) and every delivery still
waiting for it.`, getenv, stdout, stderr)
	db := addDBFlags(fs)
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError("webhook remove takes exactly one argument: the subscriber's ID")
	}
	id, err := strconv.ParseInt(rest[0], 10, 64)
	if err != nil || id < 1 {
		return usageError(fmt.Sprintf("webhook remove: %q is not a subscriber ID (see webhook list)", rest[0]))
	}
	store, err := db.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.RemoveSubscriber(ctx, id); err != nil {
		return cliError(err)
	}
	fmt.Fprintf(stderr, "removed webhook subscriber %d and its pending deliveries\n", id)
	return nil
}
