package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Event is one change of one plant, from the change feed (GET /events).
// Plant is the plant as the change left it; for a delete, as it was.
type Event struct {
	ID    int64     `json:"id"`
	Type  string    `json:"type"`
	Time  time.Time `json:"time"`
	Plant Plant     `json:"plant"`
}

// The event types.
const (
	EventCreated = "plant.created"
	EventUpdated = "plant.updated"
	EventDeleted = "plant.deleted"
)

// FromNow, as Events' after, follows the feed from the newest event on:
// only what happens from now, now being when Events first got an answer
// from the service (see Events), not when a stream first opened.
const FromNow int64 = -1

// EventOptions select a page of events. The zero value asks for the
// oldest events kept, in pages of the server's default size.
type EventOptions struct {
	After *int64   // the events after this id; nil for the oldest kept
	Limit int      // 1 to 1000; 0 for the server's default (100)
	Types []string // only these types; all when empty
}

// EventPage is one page of events.
type EventPage struct {
	Events []Event
	// Next is the URL of the next page, "" on the last one.
	Next string
	// Latest is the newest event id when the page was read: where a
	// client that resyncs from the plants picks the feed up.
	Latest int64
}

// ListEvents reads the first page of events opts select. Follow
// EventPage.Next with ListEventsNext. An After whose events are no longer
// all kept is a 410 *Error: resync from the plants (All), then follow
// the feed after the Latest read before.
func (c *Client) ListEvents(ctx context.Context, opts EventOptions) (EventPage, error) {
	return c.ListEventsNext(ctx, c.url("/events", eventQuery(opts.After, opts.Limit, opts.Types)))
}

// ListEventsNext reads the page of events at next, an EventPage.Next.
func (c *Client) ListEventsNext(ctx context.Context, next string) (EventPage, error) {
	if err := c.checkOwn(next); err != nil {
		return EventPage{}, err
	}
	var page EventPage
	var header http.Header
	if err := c.do(ctx, http.MethodGet, next, nil, &page.Events, &header); err != nil {
		return EventPage{}, err
	}
	page.Latest, _ = strconv.ParseInt(header.Get("Latest-Event-Id"), 10, 64)
	var err error
	page.Next, err = c.nextPage(next, header)
	return page, err
}

func eventQuery(after *int64, limit int, types []string) url.Values {
	q := url.Values{}
	if after != nil {
		q.Set("after", strconv.FormatInt(*after, 10))
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if len(types) > 0 {
		q.Set("type", strings.Join(types, ","))
	}
	return q
}

// Reconnection pauses of Events: doubling from the first to the last.
// firstReconnectPause is also the least a stream's retry field sets the
// first pause to, and lastReconnectPause caps every wait.
const (
	firstReconnectPause = 500 * time.Millisecond
	lastReconnectPause  = 30 * time.Second
)

// Events follows the change feed as a stream: it yields each event after
// the one with id after (0 for every event since the first, FromNow for
// only those to come), of types when given, in order, as it happens,
// until ctx ends or the loop stops. After 0 ends with a 410 once the
// service has pruned its first events (--event-retention, 7 days by
// default): to begin with the oldest kept, read one page of ListEvents
// without After and follow after the id before its first event.
//
// When the connection breaks, or the service shuts down, it yields the
// error and, if the loop goes on, reconnects after a pause with the id of
// the last event yielded (Last-Event-ID), so it neither misses an event
// nor repeats one; so too after a 5xx, 408 or 429 answer.
//
// From FromNow, it first reads where now is: the id of the newest event,
// from the Latest-Event-Id of a page of one event, asked for again like
// a stream after an error that may pass, and it streams after that id
// from its first stream on. So an event made while its first stream is
// refused (429: the token's streams all open; 503; a broken connection)
// is yielded once one opens, not missed. Only from a server whose page
// carries no Latest-Event-Id is now when the first stream opens.
//
// The pause starts at 0.5 s. A stream's retry field, as the SSE standard
// defines it (a reconnection time in milliseconds, ASCII digits alone),
// sets where it starts from then on; the service sends 2 s. A retry
// under 0.5 s counts as 0.5 s, as in Firefox, so that a retry of 0 does
// not have a follower ask again at once, over and over; one over 30 s
// counts as 30 s. A value that is not digits alone, or has more than 9 of
// them (leading zeros aside), is ignored. The pause doubles at each
// reconnection that yields no event, up to 30 s, and is back to its
// start after one that did; a retry longer than the pause lengthens it
// at once.
//
// Each wait is drawn at random from the upper half of the pause, from
// half of it to all of it, as the client's retries of requests are
// (RetryPolicy): followers cut off together, when the service restarts,
// then come back spread over that half rather than all at once, and none
// waits less than half the pause, so a failing service is still spared.
// After a 429 or 503 with a Retry-After (seconds or an HTTP-date), which
// the service sends when it has as many streams open as it may, the wait
// is never shorter than the Retry-After: with P the pause and R the
// Retry-After, it is drawn from max(P/2, R) to max(P, R + R/4), so that
// followers refused together are spread too, above what the service
// asked. No wait is longer than 30 s: a Retry-After of more than 30 s is
// waited for 30 s only, so a follower asks again at least every 30 s,
// whatever the header says (a clock far off, or a value that would stall
// the follow for hours), and a refusal costs the service little.
// ReconnectPause tells how long it waits after an error it yielded: the
// wait drawn.
//
// An error reconnecting cannot mend (see Permanent) ends it after it is
// yielded: a 410 *Error when the events after the position are no
// longer kept (resync from the plants, then follow after the Latest of
// ListEvents read before), any other 4xx, a redirect to another origin,
// a server certificate that does not verify, a server that answers an
// https base URL in plain HTTP, or a malformed event or one longer than
// 1 MiB (the events before it are yielded first).
//
// A stream stays open until ctx ends: it ignores the Timeout of
// WithHTTPClient's client, which would cut it (and delay events by the
// reconnection's pause) whenever the feed is quiet for that long. A
// stream that sends nothing for WithStreamSilence's time (45 s: three of
// the service's keep-alive comments, one every 15 s), answer head
// included, is taken for lost and read again from where it was, with an
// error yielded as for any broken stream. The time the loop spends on an
// event does not count: a slow consumer is not a silent stream.
func (c *Client) Events(ctx context.Context, after int64, types ...string) iter.Seq2[Event, error] {
	return c.events(ctx, after, types, sleep)
}

// events is Events, waiting each pause before a reconnection with wait,
// which tests replace to see the pauses without waiting them.
func (c *Client) events(ctx context.Context, after int64, types []string, wait func(context.Context, time.Duration) bool) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		start := firstReconnectPause // or the streams' retry field
		pause := start
		located := after != FromNow
		for ctx.Err() == nil {
			var received bool
			var err error
			if !located {
				err = c.locate(ctx, &after)
				located = err == nil
			}
			if located {
				if received, err = c.follow(ctx, &after, &start, types, yield); err == nil {
					return // the loop stopped
				}
			}
			if ctx.Err() != nil {
				return
			}
			if Permanent(err) {
				yield(Event{}, err)
				return
			}
			if received {
				pause = start
			} else {
				pause = max(pause, start) // a longer retry field counts at once
			}
			d := reconnectPause(pause, err)
			if !yield(Event{}, &reconnecting{err: err, pause: d}) || !wait(ctx, d) {
				return
			}
			pause = min(2*pause, lastReconnectPause)
		}
	}
}

// locate sets *after, FromNow, to the id of the feed's newest event, so
// that a follow from now starts from the moment it was asked for, not
// from when a stream first opens: a follower refused at first (429: the
// token's streams all open; 503; a broken connection) would otherwise
// ask again from a later now, and miss the events in between. A page of
// one event carries the id (Latest-Event-Id); pages are not limited as
// streams are, and an error here is retried as a stream's is. A 200
// without the header (a server that is not plantstore, or an older one)
// leaves *after at FromNow, for the stream to tell.
func (c *Client) locate(ctx context.Context, after *int64) error {
	target := c.url("/events", eventQuery(nil, 1, nil))
	var header http.Header
	if err := c.sendOnce(ctx, request{method: http.MethodGet, target: target, header: &header}); err != nil {
		return schemeMismatch(target, err)
	}
	if latest, err := strconv.ParseInt(header.Get("Latest-Event-Id"), 10, 64); err == nil && latest >= 0 {
		*after = latest
	}
	return nil
}

// schemeMismatch is err, from a request to target, said plainly and
// made Permanent when the server answered an https URL in plain HTTP.
func schemeMismatch(target string, err error) error {
	if !plainHTTP(err) {
		return err
	}
	origin := target
	if u, perr := url.Parse(target); perr == nil {
		origin = (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
	}
	return fmt.Errorf("plantstore: the server at %s answered in plain HTTP, not HTTPS: %w", origin, http.ErrSchemeMismatch)
}

// sleep waits d, and says false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// reconnectPause is how long Events waits after err before reconnecting,
// when its own pause is pause: drawn at random from reconnectWindow.
func reconnectPause(pause time.Duration, err error) time.Duration {
	return between(reconnectWindow(pause, err))
}

// reconnectWindow is the shortest and the longest wait after err when
// Events' own pause is pause (at most lastReconnectPause): its upper half,
// and for a 429 or 503 never less than the Retry-After, which may add a
// quarter, up to lastReconnectPause (see Events).
func reconnectWindow(pause time.Duration, err error) (low, high time.Duration) {
	low, high = pause/2, pause
	switch StatusCode(err) {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		floor := min(RetryAfter(err), lastReconnectPause)
		low = max(low, floor)
		high = max(high, min(floor+floor/4, lastReconnectPause))
	}
	return low, high
}

// reconnecting is an error Events yields before it reconnects, with the
// pause it then waits. It reads as the error itself.
type reconnecting struct {
	err   error
	pause time.Duration
}

func (r *reconnecting) Error() string { return r.err.Error() }
func (r *reconnecting) Unwrap() error { return r.err }

// ReconnectPause returns how long Events waits, after yielding err, before
// it reconnects: exactly the wait drawn, from its own pause or from the
// service's Retry-After (see Events).
// It is 0 for an error Events ends on (Permanent) and for one that Events
// did not yield.
func ReconnectPause(err error) time.Duration {
	if r, ok := errors.AsType[*reconnecting](err); ok {
		return r.pause
	}
	return 0
}

// Permanent says whether err, as Events yields it, is one that asking
// again unchanged cannot mend, so Events ends after it: a 4xx answer
// other than 408 and 429 (a bad token, a missing scope, a wrong path, a
// 410), a 3xx it did not follow, a redirect to another origin (refused:
// the token stays on the base URL's origin) or too many redirects, an
// answer that is not an event stream (not a plantstore server), a server
// certificate that does not verify (signed by an authority not trusted,
// for another name, expired: WithTLSConfig's RootCAs, the address or the
// certificate must change first), a server that answers an https base
// URL in plain HTTP (http.ErrSchemeMismatch: it serves no TLS there), and
// a malformed event (data that is not JSON of an Event with an id, named
// by its id when the stream gave one) or an event longer than 1 MiB. The
// last two are the service's defect, yet reconnecting after the last
// good event would only read the same event again, forever; ending shows
// it to the caller, who may report it, or skip it (and the change it
// carried) by following again after its id. A 5xx, 408 or 429 answer and
// a failed or broken connection are not.
func Permanent(err error) bool {
	if status := StatusCode(err); status != 0 {
		return status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
	}
	_, redirect := errors.AsType[*redirectRefused](err)
	return redirect || errors.Is(err, errTooManyRedirects) || errors.Is(err, errNotEventStream) ||
		errors.Is(err, errMalformedEvent) || errors.Is(err, errEventTooLong) ||
		certificateRefused(err) || errors.Is(err, http.ErrSchemeMismatch)
}

// certificateRefused says whether err is a server certificate that did
// not verify: crypto/tls wraps the x509 error in a
// *tls.CertificateVerificationError, a tls.Config's own VerifyConnection
// may return it bare.
func certificateRefused(err error) bool {
	_, verification := errors.AsType[*tls.CertificateVerificationError](err)
	_, authority := errors.AsType[x509.UnknownAuthorityError](err)
	_, hostname := errors.AsType[x509.HostnameError](err)
	_, invalid := errors.AsType[x509.CertificateInvalidError](err)
	return verification || authority || hostname || invalid
}

// plainHTTP says whether err is an https request answered in plain HTTP:
// net/http's http.ErrSchemeMismatch, or the TLS record error it makes
// that of, as a RoundTripper of WithHTTPClient's client may return it
// wrapped (http.Client recognises it only bare).
func plainHTTP(err error) bool {
	if errors.Is(err, http.ErrSchemeMismatch) {
		return true
	}
	r, ok := errors.AsType[tls.RecordHeaderError](err)
	return ok && string(r.RecordHeader[:]) == "HTTP/"
}

// errNotEventStream is a 200 answer to a stream that is not one: the base
// URL names something else than a plantstore server.
var errNotEventStream = errors.New("not an event stream")

// errMalformedEvent is an event whose data is not JSON of an Event (an
// id among it): the service's defect, which it sends again to every
// reconnection after the same last event.
var errMalformedEvent = errors.New("malformed event")

// maxEventLine bounds a line of a stream, as follow reads it. The
// service's longest line is an event's data: a name of at most 200
// characters and a tag of at most 100, neither with a control character,
// are at most 1,200 bytes of JSON (4 bytes a character in UTF-8, or 2 for
// an escaped quote or backslash), and the ids, type, time and field names
// add about 150: under 1.4 KB in all. 1 MiB is some 700 times that, so a
// line over it is a defect, not an event too large for the client.
const maxEventLine = 1 << 20

// errEventTooLong is a line over maxEventLine: the service's defect,
// which it sends again to every reconnection after the same last event.
var errEventTooLong = errors.New("plantstore: the server sent an event longer than 1 MiB")

// eventTooLong is errEventTooLong for the event of a block with the id
// line id ("" if none yet), read after the event with id after.
func eventTooLong(id string, after int64) error {
	var which []string
	if id != "" {
		which = append(which, "event "+idForError(id))
	}
	if after != FromNow {
		which = append(which, fmt.Sprintf("after event %d", after))
	}
	if len(which) == 0 {
		return errEventTooLong
	}
	return fmt.Errorf("%w (%s)", errEventTooLong, strings.Join(which, ", "))
}

// whichEvent names, for an error, the event of a block with the id line
// id ("" if none), read after the event with id after.
func whichEvent(id string, after int64) string {
	switch {
	case id != "":
		return " " + idForError(id)
	case after != FromNow:
		return fmt.Sprintf(" (after event %d)", after)
	}
	return ""
}

// idForError is an id line's value as an error names it: as sent when
// it is a number, quoted when not.
func idForError(id string) string {
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		return strconv.Quote(id)
	}
	return id
}

// errStreamEnded is a stream the service closed, at shutdown say.
var errStreamEnded = errors.New("plantstore: the server ended the event stream")

// follow reads one stream, yielding its events, moving *after past each
// and setting *retry to the pause each valid retry field asks for. It
// returns nil when yield asked to stop, else why the stream ended, and
// whether it yielded any event.
func (c *Client) follow(ctx context.Context, after *int64, retry *time.Duration, types []string, yield func(Event, error) bool) (received bool, err error) {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/events", eventQuery(nil, 0, types)), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "text/event-stream")
	if *after != FromNow {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*after, 10))
	}
	// A stream that says nothing, not even its keep-alive, for
	// c.silence (nor its answer's head, in as long) has lost its server:
	// a proxy that keeps the client's side open, a peer gone without a
	// word. It is read again from where it was.
	silence := c.silence
	if silence <= 0 {
		silence = DefaultStreamSilence
	}
	silent := time.AfterFunc(silence, cancel)
	defer silent.Stop()
	wasSilent := func() bool { return ctx.Err() != nil && parent.Err() == nil }
	streaming := *c.http
	streaming.Timeout = 0 // bounded by ctx alone (see Events)
	resp, err := streaming.Do(req)
	if err != nil {
		if wasSilent() {
			return false, fmt.Errorf("%w for %v", errStreamSilent, silence)
		}
		return false, schemeMismatch(req.URL.String(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		e := errorOf(resp.StatusCode, data)
		e.RetryAfter = retryAfter(resp.Header, time.Now())
		return false, e
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return false, fmt.Errorf("plantstore: GET %s answered %q, %w", req.URL.Path, ct, errNotEventStream)
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	var data strings.Builder
	var id string // of the block being read
	for lines.Scan() {
		silent.Reset(silence)
		line := lines.Text()
		if line != "" {
			// Data carries the event, its id and type too.
			if value, ok := strings.CutPrefix(line, "data:"); ok {
				value = strings.TrimPrefix(value, " ")
				if data.Len()+len(value) > maxEventLine {
					// Many data lines, each short: one event all the same.
					return received, eventTooLong(id, *after)
				}
				data.WriteString(value)
			}
			// An id without data is the position past events a type
			// filter left out: resume after it.
			if value, ok := strings.CutPrefix(line, "id:"); ok {
				id = strings.TrimPrefix(value, " ")
			}
			if value, ok := strings.CutPrefix(line, "retry:"); ok {
				if d, ok := retryField(strings.TrimPrefix(value, " ")); ok {
					*retry = d
				}
			}
			// A stream from now names where now is, so that a
			// reconnection misses nothing in between.
			if value, ok := strings.CutPrefix(line, streamStart); ok && *after == FromNow {
				if id, err := strconv.ParseInt(value, 10, 64); err == nil {
					*after = id
				}
			}
			continue
		}
		if data.Len() == 0 {
			// A comment, the retry field, or an id alone.
			if n, err := strconv.ParseInt(id, 10, 64); err == nil && n > *after {
				*after = n
			}
			id = ""
			continue
		}
		blockID := id
		id = ""
		var e Event
		if err := json.Unmarshal([]byte(data.String()), &e); err != nil || e.ID < 1 {
			if err == nil {
				err = errors.New("no id")
			}
			return received, fmt.Errorf("plantstore: the server sent a %w%s: %w", errMalformedEvent, whichEvent(blockID, *after), err)
		}
		data.Reset()
		if e.ID <= *after && *after != FromNow {
			continue // never twice
		}
		*after, received = e.ID, true
		// The loop's own time with an event is no silence of the stream.
		silent.Stop()
		if !yield(e, nil) {
			return received, nil
		}
		silent.Reset(silence)
	}
	if err := lines.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return received, eventTooLong(id, *after)
		}
		if wasSilent() {
			return received, fmt.Errorf("%w for %v", errStreamSilent, silence)
		}
		return received, err
	}
	return received, errStreamEnded
}

// errStreamSilent is a stream that sent nothing, not even a keep-alive,
// for longer than the client waits (WithStreamSilence).
var errStreamSilent = errors.New("plantstore: the event stream was silent")

// DefaultStreamSilence is how long a stream may send nothing before
// Events reads it again: three of the service's keep-alives, one every
// 15 s.
const DefaultStreamSilence = 45 * time.Second

// WithStreamSilence sets how long a stream Events follows may send
// nothing, not even the service's keep-alive comment, before the client
// takes it for lost and reconnects, resuming where it was (default
// DefaultStreamSilence, which 0 or less also means). TCP alone can take
// many minutes to find a dead peer, and never a proxy that keeps the
// client's side open after losing the server's.
func WithStreamSilence(d time.Duration) Option { return func(c *Client) { c.silence = d } }

// retryField is the first reconnection pause a stream's retry field with
// value asks for, and false when it is to be ignored (see Events): not
// ASCII digits alone, or more than 9 of them, leading zeros aside, which
// is 11 days and more, no server's wish.
func retryField(value string) (time.Duration, bool) {
	if value == "" || strings.Trim(value, "0123456789") != "" {
		return 0, false
	}
	digits := strings.TrimLeft(value, "0")
	if len(digits) > 9 {
		return 0, false
	}
	ms, _ := strconv.Atoi(digits) // 0 for ""
	return min(max(time.Duration(ms)*time.Millisecond, firstReconnectPause), lastReconnectPause), true
}

// streamStart begins the comment with which a stream names the id it
// follows after.
const streamStart = ": events after "
