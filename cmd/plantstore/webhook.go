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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/webhook"
)

const webhookUsage = `Usage: plantstore webhook add|list|remove|retry [flags]

Manages the subscribers that hear of the changes of plants, in the store
at --db. Each gets POST URL for each event of the types it asked for
(plant.created unless --events says more): the NewPlant for a new plant,
the event as GET /events shows it for an update or a delete, as JSON,
signed as Standard Webhooks signs (webhook-id, webhook-timestamp,
webhook-signature).
  webhook add URL [--events TYPES]
                         prints the new subscriber's signing secret, once
  webhook list [--json]  subscribers, their events, state, delivery counts
                         and last error, then the parked deliveries; never
                         secrets (URLs as scheme://host/…#hash unless
                         --full-urls)
  webhook remove ID      the subscriber and its pending deliveries
  webhook retry ID...    sends parked deliveries again (or every one of a
                         subscriber, with --subscriber ID)
Run "plantstore webhook SUBCOMMAND --help" for its flags.
`

func runWebhook(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("webhook needs a subcommand: add, list, remove or retry")
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
	case "retry":
		return webhookRetry(ctx, args[1:], getenv, stdout, stderr)
	}
	return usageError(fmt.Sprintf("unknown webhook subcommand %q: want add, list, remove or retry", args[0]))
}

// webhookAdd prints the signing secret alone on stdout, so that
// SECRET=$(plantstore webhook add URL) captures it; the rest goes to stderr.
func webhookAdd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("webhook add", `webhook add URL [--events TYPES] [--db PATH]

Subscribes URL (http or https) to new plants (to the changes of
--events) and prints its signing secret ("whsec_" + base64) on stdout; it
is shown only this once (with standard output closed or on /dev/null, add
makes nothing and exits 1). Servers refuse to deliver to loopback,
private and link-local addresses unless they run with
--allow-private-webhooks, and to cloud metadata addresses unless they run
with --allow-metadata-webhooks: add warns when the URL's host is (or, as
this machine resolves it, resolves to) such an address, and adds it all
the same. Receivers verify each delivery's signature with the secret
(docs/webhooks.md).`, getenv, stdout, stderr)
	db := addDBFlags(fs)
	// Command line only, as the URL is.
	eventList := fs.FlagSet.String("events", plantstore.EventCreated, "the event `TYPES` to send, comma-separated: "+strings.Join(plantstore.EventTypes, ","))
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
	var events []string
	for e := range strings.SplitSeq(*eventList, ",") {
		if e = strings.TrimSpace(e); e != "" {
			events = append(events, e)
		}
	}
	asked := events
	if events, err = plantstore.SubscriberEvents(asked); err != nil {
		hint := ""
		for _, e := range asked {
			if !plantstore.ValidEventType(e) {
				hint = didYouMean(e, plantstore.EventTypes, "")
				break
			}
		}
		return usageError("--events: " + plantstore.ErrorMessage(err) + hint)
	}
	if err := canShowSecret(stdout); err != nil {
		return err
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
	sub, err := store.AddSubscriberFor(ctx, rest[0], secret, events)
	if err != nil {
		return cliError(err)
	}
	if _, werr := fmt.Fprintln(stdout, secret); werr != nil {
		// Without its secret no receiver can verify a delivery: remove
		// the subscriber rather than sign deliveries no one can check.
		if err := store.RemoveSubscriber(ctx, sub.ID); err != nil {
			return fmt.Errorf("the signing secret could not be written to standard output (%v), and removing subscriber %d failed (%v): remove it with plantstore webhook remove %d", werr, sub.ID, cliError(err), sub.ID)
		}
		return fmt.Errorf("the signing secret could not be written to standard output (%v), so the subscriber was removed at once; run webhook add again with standard output where it can be written", werr)
	}
	// Not the URL as typed: its path or query may hold the subscriber's
	// own secret, and terminal output ends up in CI logs and scrollback.
	fmt.Fprintf(stderr, "added webhook subscriber %d for %s (%s); its signing secret is shown only this once\n",
		sub.ID, tableCell(webhook.RedactURL(sub.URL)), strings.Join(sub.Events, ","))
	warnPrivate(ctx, sub.URL, stderr)
	warnSameURL(ctx, store, sub, stderr)
	return nil
}

// warnSameURL says on stderr when other active subscribers have sub's URL:
// each event they share then goes to it once per subscriber. Allowed (a
// receiver may want two secrets while it rotates one), but more often a
// second run of the same add.
func warnSameURL(ctx context.Context, store plantstore.Store, sub plantstore.Subscriber, stderr io.Writer) {
	subs, err := store.Subscribers(ctx)
	if err != nil {
		return
	}
	var same []string
	for _, other := range subs {
		if other.ID != sub.ID && other.DisabledAt == nil && sameEndpoint(other.URL, sub.URL) &&
			slices.ContainsFunc(other.Events, func(e string) bool { return slices.Contains(sub.Events, e) }) {
			same = append(same, strconv.FormatInt(other.ID, 10))
		}
	}
	switch len(same) {
	case 0:
	case 1:
		fmt.Fprintf(stderr, "warning: subscriber %s has this URL too: the events both want go to it once for each; remove one with plantstore webhook remove ID if that was not meant\n", same[0])
	default:
		fmt.Fprintf(stderr, "warning: subscribers %s have this URL too: the events they share go to it once for each; remove the ones not meant with plantstore webhook remove ID\n",
			strings.Join(same[:len(same)-1], ", ")+" and "+same[len(same)-1])
	}
}

// sameEndpoint says whether two subscribers' URLs name one endpoint: equal
// but for the case of the scheme and host, which name no other.
func sameEndpoint(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Host, ub.Host) &&
		ua.RawPath == ub.RawPath && ua.Path == ub.Path && ua.RawQuery == ub.RawQuery
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

// maxParkedListed bounds the parked deliveries webhook list shows.
const maxParkedListed = 1000

func webhookList(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("webhook list", `webhook list [--json] [--db PATH]

Shows each subscriber: its URL; the event types it gets; its state,
"active" (its last attempt, if any, was delivered), "failing" (its last
attempt failed: the delivery is retried, or was parked) or "disabled" (it
answered 410 Gone and gets no events); its deliveries pending, delivered
and parked (retried for --webhook-park-after, then set aside so that
their plants' later events go on); and its last error with when it
happened, cleared by the next successful delivery. Then the parked
deliveries, by id, their events' order (at most 1000): their ID, which webhook retry
takes, the event, and why the last attempt failed. Never a signing
secret. A URL shows as its scheme and host and a hash of the rest
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
	parked, err := store.ParkedDeliveries(ctx, 0, maxParkedListed)
	if err != nil {
		return cliError(err)
	}
	shown := webhook.RedactURL
	if *fullURLs {
		shown = func(u string) string { return u }
	}
	if *asJSON {
		return printSubscribersJSON(stdout, subs, parked, shown)
	}
	return printSubscribers(stdout, subs, parked, shown)
}

// printSubscribersJSON prints webhook list --json: each subscriber with its
// parked deliveries.
func printSubscribersJSON(stdout io.Writer, subs []plantstore.Subscriber, parked []plantstore.Delivery, shown func(string) string) error {
	type parkedJSON struct {
		ID         int64     `json:"id"`
		WebhookID  string    `json:"webhook_id"`
		EventID    int64     `json:"event_id,omitempty"`
		EventType  string    `json:"event_type"`
		PlantID    int64     `json:"plant_id"`
		Attempts   int       `json:"attempts"`
		ParkedAt   time.Time `json:"parked_at"`
		LastStatus int       `json:"last_status,omitempty"`
		LastError  string    `json:"last_error,omitempty"`
	}
	type subscriberJSON struct {
		ID             int64        `json:"id"`
		URL            string       `json:"url"`
		Events         []string     `json:"events"`
		State          string       `json:"state"`
		CreatedAt      time.Time    `json:"created_at"`
		DisabledAt     *time.Time   `json:"disabled_at,omitempty"`
		DisabledReason string       `json:"disabled_reason,omitempty"`
		Pending        int64        `json:"pending"`
		Delivered      int64        `json:"delivered"`
		Failed         int64        `json:"failed"` // parked: the name it had before parking
		LastError      string       `json:"last_error,omitempty"`
		LastErrorAt    *time.Time   `json:"last_error_at,omitempty"`
		NextProbe      *time.Time   `json:"next_probe,omitempty"`
		Parked         []parkedJSON `json:"parked"`
	}
	out := make([]subscriberJSON, 0, len(subs))
	for _, s := range subs {
		js := subscriberJSON{s.ID, shown(s.URL), s.Events, s.State(), s.CreatedAt, s.DisabledAt, s.DisabledReason,
			s.Pending, s.Delivered, s.Failed, s.LastError, s.LastErrorAt, s.NextProbe, []parkedJSON{}}
		for _, d := range parked {
			if d.SubscriberID == s.ID {
				js.Parked = append(js.Parked, parkedJSON{d.ID, d.EventID, d.Seq, d.EventType, d.Plant.ID, d.Attempts,
					*d.ParkedAt, d.LastStatus, d.LastError})
			}
		}
		out = append(out, js)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// printSubscribers prints webhook list's tables: the subscribers, then
// their parked deliveries when there are any.
func printSubscribers(stdout io.Writer, subs []plantstore.Subscriber, parked []plantstore.Delivery, shown func(string) string) error {
	t := newTable(stdout, "ID", "URL", "EVENTS", "STATE", "PENDING", "DELIVERED", "PARKED", "CREATED", "NEXT PROBE", "LAST ERROR AT", "LAST ERROR")
	for _, s := range subs {
		nextProbe := "-"
		if s.NextProbe != nil {
			nextProbe = timeOrNever(*s.NextProbe)
		}
		t.add(fmt.Sprint(s.ID), tableCell(shown(s.URL)), strings.Join(s.Events, ","), s.State(),
			fmt.Sprint(s.Pending), fmt.Sprint(s.Delivered), fmt.Sprint(s.Failed), timeOrNever(s.CreatedAt), nextProbe, lastErrorAt(s), tableCell(orDash(s.LastError)))
	}
	if err := t.flush(); err != nil || len(parked) == 0 {
		return err
	}
	fmt.Fprintln(stdout)
	t = newTable(stdout, "PARKED", "SUBSCRIBER", "EVENT", "TYPE", "PLANT", "ATTEMPTS", "PARKED AT", "LAST ERROR")
	for _, d := range parked {
		seq := "-"
		if d.Seq > 0 {
			seq = fmt.Sprint(d.Seq)
		}
		t.add(fmt.Sprint(d.ID), fmt.Sprint(d.SubscriberID), seq, string(d.EventType), fmt.Sprint(d.Plant.ID), fmt.Sprint(d.Attempts),
			timeOrNever(*d.ParkedAt), tableCell(orDash(d.LastError)))
	}
	return t.flush()
}

func webhookRetry(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("webhook retry", `webhook retry ID... [--db PATH]
webhook retry --subscriber ID [--db PATH]

Sends parked deliveries again: those with the IDs webhook list shows in
its PARKED column, or every parked delivery of the subscriber with
--subscriber. Each goes out when a server next looks for due deliveries
(within its --webhook-poll), with the same webhook-id as before, its attempts counted from zero; after
its plant's later events, which went on while it was parked, so receivers
order a plant's events by plantstore-event-id. Deliveries of a disabled
subscriber stay parked.`, getenv, stdout, stderr)
	db := addDBFlags(fs)
	subscriber := fs.FlagSet.Int64("subscriber", 0, "retry every parked delivery of this subscriber")
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) == 0 && *subscriber == 0:
		return usageError("webhook retry: give the parked delivery IDs to send again, or --subscriber ID for all of one subscriber's (webhook list shows them)")
	case len(rest) > 0 && *subscriber != 0:
		return usageError("webhook retry takes parked delivery IDs or --subscriber ID, not both")
	}
	if *subscriber < 0 {
		return usageError("--subscriber: want a subscriber ID (see webhook list)")
	}
	var ids []int64
	for _, a := range rest {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 1 {
			return usageError(fmt.Sprintf("webhook retry: %q is not a delivery ID (see webhook list)", a))
		}
		ids = append(ids, id)
	}
	store, err := db.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	n, err := store.RetryDeliveries(ctx, *subscriber, ids)
	if err != nil {
		return cliError(err)
	}
	if n == 1 {
		fmt.Fprintln(stderr, "1 parked delivery will be sent again")
	} else {
		fmt.Fprintf(stderr, "%d parked deliveries will be sent again\n", n)
	}
	return nil
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
