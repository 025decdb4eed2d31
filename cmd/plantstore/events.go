package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/plantstore/plantstore/client"
)

const eventsUsage = `events [--after ID] [--type TYPES] [--follow] [--json]

Prints the change feed of a running server: one line per change of a
plant (id, time, type, plant id, name, tag), oldest first.

Without --follow it prints the events kept (or those after --after) and
exits. With --follow it goes on printing each change as it happens, from
now (or after --after), until interrupted; when the connection breaks,
or the server refuses for now (5xx, 408, 429), it says so on standard
error, waits (0.5 s at first, or the retry time the server's stream
asks for, doubling while it fails; each wait drawn at random between
half of that and all of it, so that followers do not all come back at
once, and never shorter than a Retry-After asks; 30 s at most),
reconnects, and resumes where it was, missing nothing. Other refusals
end it, saying why: a 4xx (a bad token, a wrong path), a redirect to
another origin, where the token is not sent, a server certificate that
does not verify (for a private CA, give --ca-cert), an https --server
that answers in plain HTTP, or a malformed or over-long event, which it
names (the server's defect; --after its id skips it). If the events
after --after are no longer kept (or it is after the newest, as after a
restore), it fails with HTTP 410 and names the newest event: read the
plants again (plants list --all), then follow after that one.`

func runEvents(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("events", eventsUsage, getenv, stdout, stderr)
	api := addServerFlags(fs, "access `TOKEN` with plants:read", streamTimeoutUsage)
	asJSON := fs.Bool("json", false, "print each event as a line of JSON")
	follow := fs.Bool("follow", false, "go on printing changes as they happen")
	after := fs.FlagSet.String("after", "", "only events after the one with this `ID`")
	types := fs.FlagSet.String("type", "", "only events of these `TYPES`, comma-separated: plant.created, plant.updated, plant.deleted")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArguments("events", positional); err != nil {
		return err
	}
	var from *int64
	if *after != "" {
		n, err := strconv.ParseInt(*after, 10, 64)
		if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(*after, "-") {
			return usageError(fmt.Sprintf("--after %q: beyond the largest event id, %d", *after, int64(math.MaxInt64)))
		}
		if err != nil || n < 0 {
			return usageError(fmt.Sprintf("--after %q: want an event id, an integer 0 or more", *after))
		}
		from = &n
	}
	var only []string
	for t := range strings.SplitSeq(*types, ",") {
		switch t = strings.TrimSpace(t); t {
		case "":
		case client.EventCreated, client.EventUpdated, client.EventDeleted:
			only = append(only, t)
		default:
			return usageError(fmt.Sprintf("--type %q: the types are plant.created, plant.updated and plant.deleted", t))
		}
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	server := api.server.String()
	w := &outputWriter{w: stdout}
	out := eventPrinter{w: w, json: *asJSON}
	if !*follow {
		return w.outcome(resyncAdvice(ctx, c, printEvents(ctx, c, from, only, out)), server)
	}
	start := client.FromNow
	if from != nil {
		start = *from
	}
	for ev, err := range c.Events(ctx, start, only...) {
		if err != nil {
			if client.Permanent(err) {
				return apiError(resyncAdvice(ctx, c, err), server) // Events ends after it
			}
			in := seconds(client.ReconnectPause(err))
			if e, ok := errors.AsType[*client.Error](err); ok { // for now: too many streams, a proxy whose server restarts
				fmt.Fprintf(stderr, "plantstore: %s; reconnecting in %s\n", refusal(e), in) // the wait said once
			} else {
				fmt.Fprintf(stderr, "plantstore: the stream broke (%s); reconnecting in %s\n", serverMessage(strings.TrimPrefix(err.Error(), "plantstore: ")), in)
			}
			continue
		}
		if out.print(ev) != nil {
			return w.failure()
		}
	}
	return nil // interrupted
}

// seconds is d for a person: "0.5 s", "30 s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Round(100*time.Millisecond).Seconds(), 'f', -1, 64) + " s"
}

// resyncAdvice words a 410 for the command line: the server's advice
// points to a header the user does not see, so it names the newest event
// instead, where following picks up after reading the plants again.
func resyncAdvice(ctx context.Context, c *client.Client, err error) error {
	e, ok := errors.AsType[*client.Error](err)
	if !ok || e.StatusCode != http.StatusGone {
		return err
	}
	page, lerr := c.ListEvents(ctx, client.EventOptions{Limit: 1})
	if lerr != nil {
		return err
	}
	why, _, _ := strings.Cut(e.Message, ": resync")
	reworded := *e
	reworded.Message = fmt.Sprintf("%s: resync: read the plants again (plantstore plants list --all), then follow after the newest event, %d (plantstore events --follow --after %d)",
		why, page.Latest, page.Latest)
	return &reworded
}

// printEvents prints every page of events after from (the oldest kept
// when nil).
func printEvents(ctx context.Context, c *client.Client, from *int64, only []string, out eventPrinter) error {
	page, err := c.ListEvents(ctx, client.EventOptions{After: from, Limit: 1000, Types: only})
	var last int64 // the newest event printed
	for {
		if err != nil {
			return err
		}
		moved := false
		for _, ev := range page.Events {
			if ev.ID <= last {
				continue // printed already: never twice
			}
			if err := out.print(ev); err != nil {
				return err
			}
			last, moved = ev.ID, true
		}
		if page.Next == "" {
			return nil
		}
		// The service links a next page after a full one, past its last
		// event: a page that brought nothing new would be read for ever.
		if !moved {
			return fmt.Errorf("the server sent a page of events (%d, none new) with a next page (%s); not following it, as it may never end", len(page.Events), page.Next)
		}
		page, err = c.ListEventsNext(ctx, page.Next)
	}
}

// eventPrinter writes events one line each, as they come: columns
// separated by two spaces (a table cannot be aligned before its last
// row arrives), or JSON.
type eventPrinter struct {
	w    io.Writer
	json bool
}

func (p eventPrinter) print(ev client.Event) error {
	var err error
	if p.json {
		var b []byte
		if b, err = json.Marshal(ev); err == nil {
			_, err = fmt.Fprintf(p.w, "%s\n", b)
		}
	} else {
		_, err = fmt.Fprintf(p.w, "%d  %s  %s  %d  %s  %s\n", ev.ID, ev.Time.UTC().Format("2006-01-02T15:04:05.000Z"),
			tableCell(ev.Type), ev.Plant.ID, tableCell(ev.Plant.Name), tagCell(ev.Plant.Tag))
	}
	return err
}
