package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/accept"
)

// GET /events is the change feed, as pages of JSON or, to a client that
// accepts text/event-stream, as a stream of Server-Sent Events that
// resumes after Last-Event-ID. See docs/events.md.

// Defaults of the stream settings of Config.
const (
	DefaultMaxStreams         = 1000
	DefaultMaxStreamsPerToken = 20
	DefaultStreamKeepAlive    = 15 * time.Second
	DefaultEventPoll          = time.Second
	DefaultEventLimit         = 100
	MaxEventLimit             = 1000
)

// streamRetry is the reconnection delay a stream asks its client for, in
// milliseconds: soon, but not at once, after a shutdown.
const streamRetry = 2000

// latestEventHeader names, on a page of events, the newest event id at
// the time of the read: where a client that resyncs from GET /plants
// picks the feed up afterwards.
const latestEventHeader = "Latest-Event-Id"

// encodeEvent encodes e as the API shows it, once for every stream.
func encodeEvent(e plantstore.Event) feedEvent {
	return feedEvent{id: e.ID, typ: e.Type, data: appendEvent(nil, e)}
}

// appendEvent appends e's JSON: {"id", "type", "time", "plant"}.
func appendEvent(b []byte, e plantstore.Event) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, e.ID, 10)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.Type)
	b = append(b, `,"time":"`...)
	b = e.At.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, `","plant":`...)
	b = storedPlant(e.Plant).appendJSON(b)
	return append(b, '}')
}

// eventPage is a page of events as GET /events answers it.
type eventPage []plantstore.Event

func (page eventPage) appendJSON(b []byte) []byte {
	b = append(b, '[')
	for i, e := range page {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendEvent(b, e)
	}
	return append(b, ']')
}

// eventQuery is what GET /events was asked.
type eventQuery struct {
	after *int64 // nil: from the oldest kept (a page) or from now (a stream)
	limit int
	types []string
}

// eventQueryOf reads after, limit and type from a query, as strictly as
// listOptions does. type may be given several times, or as a comma list.
// A stream has no pages: it ignores limit, whatever its value, as the
// API document says, so that one URL serves an EventSource and a client
// reading pages alike.
func eventQueryOf(rawQuery string, stream bool) (eventQuery, error) {
	q := eventQuery{limit: DefaultEventLimit}
	v, err := parseQuery(rawQuery)
	if err != nil {
		return q, invalid("the query string is malformed: %v", err)
	}
	if stream {
		delete(v, "limit")
	}
	for _, name := range []string{"limit", "after"} {
		if len(v[name]) > 1 {
			return q, invalid("%s: give it at most once", name)
		}
	}
	if l, ok := v["limit"]; ok {
		n, err := queryLimit(l[0], MaxEventLimit)
		if err != nil {
			return q, err
		}
		q.limit = n
	}
	if a, ok := v["after"]; ok {
		after, err := eventID(a[0])
		if err != nil {
			return q, invalid("after: %s%s", err, spaceHint(a[0]))
		}
		q.after = &after
	}
	for _, list := range v["type"] {
		for t := range strings.SplitSeq(list, ",") {
			if !plantstore.ValidEventType(t) {
				return q, invalid("type: %q is not an event type; the types are %s", truncate(t, 40), strings.Join(plantstore.EventTypes, ", "))
			}
			if !slices.Contains(q.types, t) {
				q.types = append(q.types, t)
			}
		}
	}
	return q, nil
}

// eventID reads an event id: a plain integer, 0 or more.
func eventID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || !plainInteger(s) || id < 0 {
		return 0, fmt.Errorf("must be an event id, an integer from 0 to %d, got %q", int64(1<<63-1), truncate(s, 40))
	}
	return id, nil
}

// eventsNext is the query of the page after lastID.
func eventsNext(lastID int64, q eventQuery) string {
	v := url.Values{"after": {strconv.FormatInt(lastID, 10)}, "limit": {strconv.Itoa(q.limit)}}
	if len(q.types) > 0 {
		v.Set("type", strings.Join(q.types, ","))
	}
	return "?" + v.Encode()
}

// acceptsEventStream says whether a request's Accept prefers a stream to
// a page: it names text/event-stream, as EventSource's does, with a q
// above 0 and no lower than the q it gives JSON (application/json, else
// application/*, else */*: the most specific range that covers it; RFC
// 9110, section 12.5.1). A malformed q counts as 1.
func acceptsEventStream(values []string) bool {
	stream, json := -1.0, -1.0 // the q of each; -1: not named
	jsonSpecificity := 0
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			media, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			q, ok := accept.Quality(params)
			if !ok {
				q = 1
			}
			media = strings.ToLower(strings.TrimSpace(media))
			specificity := 0
			switch media {
			case "application/json":
				specificity = 3
			case "application/*":
				specificity = 2
			case "*/*":
				specificity = 1
			}
			switch {
			case media == "text/event-stream":
				stream = q
			case specificity > jsonSpecificity:
				json, jsonSpecificity = q, specificity
			}
		}
	}
	return stream > 0 && stream >= json
}

// bothWays refuses a request that sends a token in the Authorization
// header and in the access_token parameter, on every route that takes a
// token. (An empty access_token is no token: sentToken.)
var bothWays = credentialError(http.StatusBadRequest, "invalid_request",
	"send the access token one way: the Authorization header or the access_token parameter, not both", "")

// queryToken lets an event stream carry its token as the access_token
// query parameter (RFC 6750 section 2.3), as a browser's EventSource,
// which cannot set headers, must. Only a stream may, and only without an
// Authorization header: a page is fetched by code that can send the
// header, and a URL is more likely to be logged on its way than a header
// (our access log writes the path alone). A stream that sends both, or
// the parameter twice, gets 400 invalid_request (RFC 6750 sections 2 and
// 3.1: one method, one token). docs/events.md advises a token with
// plants:read only for it.
func (s *Server) queryToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !acceptsEventStream(r.Header.Values("Accept")) || !mayHoldToken(r.URL.RawQuery) {
			next.ServeHTTP(w, r)
			return
		}
		q, err := parseQuery(r.URL.RawQuery)
		switch tokens := q["access_token"]; {
		case err != nil || len(tokens) == 0:
			// Nothing to take; the handler says what is wrong with the query.
		case len(tokens) > 1:
			s.writeError(w, r, credentialError(http.StatusBadRequest, "invalid_request", "access_token: give it at most once", ""))
			return
		case len(r.Header.Values("Authorization")) > 0 && sentToken(tokens):
			s.writeError(w, r, bothWays)
			return
		case len(r.Header.Values("Authorization")) > 0:
			// An empty parameter beside the header is no second token.
		default:
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+tokens[0])
			q.Del("access_token")
			r.URL.RawQuery = q.Encode()
		}
		next.ServeHTTP(w, r)
	})
}

// handleEvents answers GET /events: a stream to a client that accepts
// one, a page to any other. A page holds a slot in flight like any plant
// operation; a stream, which stays open, holds a stream slot instead.
func (s *Server) handleEvents() http.Handler {
	page := s.limitInFlight(http.HandlerFunc(s.serveEventPage))
	stream := s.limitStreams(http.HandlerFunc(s.serveEventStream))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept")
		if acceptsEventStream(r.Header.Values("Accept")) {
			stream.ServeHTTP(w, r)
			return
		}
		page.ServeHTTP(w, r)
	})
}

func (s *Server) serveEventPage(w http.ResponseWriter, r *http.Request) {
	q, err := eventQueryOf(r.URL.RawQuery, false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Read before the page, so that no event the page misses is older.
	latest, err := s.store.LatestEventID(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	query := plantstore.EventQuery{Limit: q.limit + 1, Types: q.types, FromOldest: q.after == nil}
	if q.after != nil {
		query.After = *q.after
	}
	events, err := s.store.Events(r.Context(), query)
	if err != nil {
		if plantstore.ErrorCode(err) == plantstore.EGONE {
			// Where the resync the 410 asks for follows the feed from.
			w.Header().Set(latestEventHeader, strconv.FormatInt(latest, 10))
		}
		s.writeError(w, r, err)
		return
	}
	linksNext := len(events) > q.limit
	if linksNext {
		events = events[:q.limit]
		next := eventsNext(events[q.limit-1].ID, q)
		if base := s.baseURL(r); base != "" {
			next = base + "/events" + next
		}
		w.Header().Set("Link", fmt.Sprintf(`<%s>; rel="next"`, next))
	}
	if n := len(events); n > 0 {
		latest = max(latest, events[n-1].ID)
	}
	w.Header().Set(latestEventHeader, strconv.FormatInt(latest, 10))
	s.writeRead(w, r, eventPage(events), pageETag(linksNext))
}

// limitStreams holds a stream slot, of the token's and of the service's,
// for as long as the stream is open, or refuses the stream: 429 beyond
// the token's MaxStreamsPerToken, 503 beyond MaxStreams.
func (s *Server) limitStreams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := infoFrom(r.Context()).tokenID
		if !s.streamsPerToken.take(id) {
			s.writeError(w, r, limitError("token_streams", http.StatusTooManyRequests,
				fmt.Sprintf("this access token has %d event streams open, as many as it may; close one first", s.cfg.MaxStreamsPerToken), 5*time.Second))
			return
		}
		defer s.streamsPerToken.give(id)
		if s.streams.Add(1) > int64(s.cfg.MaxStreams) {
			s.streams.Add(-1)
			s.writeError(w, r, limitError("streams", http.StatusServiceUnavailable,
				"the service has as many event streams open as it can; retry shortly", 5*time.Second))
			return
		}
		defer s.streams.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// serveEventStream follows the feed for one client until it goes away,
// the store fails, or the service shuts down; the client then reconnects
// with the last id it received, and misses nothing.
func (s *Server) serveEventStream(w http.ResponseWriter, r *http.Request) {
	q, err := eventQueryOf(r.URL.RawQuery, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// A reconnecting EventSource sends its URL again, ?after and all, and
	// the id it last received, which is the later position.
	if len(r.Header.Values("Last-Event-ID")) > 1 {
		s.writeError(w, r, invalid("Last-Event-ID: give it at most once"))
		return
	}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		id, err := eventID(strings.TrimSpace(last))
		if err != nil {
			s.writeError(w, r, invalid("Last-Event-ID: %s", err))
			return
		}
		q.after = &id
	}
	if !s.feed.open() {
		s.writeError(w, r, plantstore.Errorf(plantstore.EUNAVAILABLE, "the service is shutting down; reconnect"))
		return
	}
	defer s.feed.done()
	// The stream lives as long as its connection, not the request
	// deadline's; each store read has a deadline of its own.
	ctx := infoFrom(r.Context()).conn
	read := func(after int64) ([]feedEvent, error) {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		defer cancel()
		events, err := s.store.Events(rctx, plantstore.EventQuery{After: after, Limit: feedPage})
		encoded := make([]feedEvent, len(events))
		for i, e := range events {
			encoded[i] = encodeEvent(e)
		}
		return encoded, err
	}

	// What comes first decides the status: 410 when the client's position
	// is gone, 503 when the store cannot answer.
	var cursor int64
	var first []feedEvent
	if q.after == nil {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		cursor, err = s.store.LatestEventID(rctx)
		cancel()
	} else {
		cursor = *q.after
		first, err = read(cursor)
		if plantstore.ErrorCode(err) == plantstore.EGONE {
			// Where the resync the 410 asks for follows the feed from.
			rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
			if latest, e := s.store.LatestEventID(rctx); e == nil {
				w.Header().Set(latestEventHeader, strconv.FormatInt(latest, 10))
			}
			cancel()
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}

	rc := http.NewResponseController(w)
	// The server's read and write timeouts are for requests; a stream
	// outlives them. Reads stay open to see the client leave, and each
	// write gets a deadline of its own below.
	rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h["Content-Type"] = []string{"text/event-stream"}
	h["Cache-Control"] = noStore
	h["X-Accel-Buffering"] = []string{"no"} // nginx: pass each event on at once
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return // the status and headers the stream would begin with, and no stream
	}
	// The comment names the position the stream follows from: a client
	// that asked from now learns where now was, and resumes from there
	// if it reconnects before the first event (the Go client does).
	buf := fmt.Appendf(nil, "retry: %d\n: events after %d\n\n", streamRetry, cursor)
	// The stream outlives the check of its token: each write checks it
	// again (from the token cache, by the hash taken once here), so the
	// stream of a revoked token ends, and sends nothing more, when a
	// request with it would be refused.
	secret, _ := bearerToken(r.Header)
	hash := s.auth.Hash(secret)
	// A shutdown ends the stream at once, and cleanly: the handler
	// returns, and the response's last chunk tells the client the stream
	// ended (rather than the connection breaking under it). The writes
	// left, that chunk or one blocked on a client that stopped reading,
	// get streamEndGrace: the shutdown moves the write deadline there.
	// send looks for the shutdown after setting its own deadline, and
	// moves it back there, so that one set after the shutdown's is never
	// written under.
	streamEnded := make(chan struct{})
	defer close(streamEnded)
	go func() {
		select {
		case <-s.feed.shutdown:
			rc.SetWriteDeadline(time.Now().Add(streamEndGrace))
		case <-streamEnded:
		}
	}()
	send := func() bool {
		now := time.Now()
		if _, err := s.auth.Lookup(s.deadlines.context(now), hash); err != nil {
			// Revoked; or the store cannot tell now, and the client's
			// reconnection will be answered as any request.
			why := "its token is no longer accepted"
			if plantstore.ErrorCode(err) != plantstore.EUNAUTHORIZED {
				why = "its token cannot be checked now"
			}
			s.log.Info("event stream ended: "+why, "request_id", infoFrom(r.Context()).id, "err", err)
			return false
		}
		rc.SetWriteDeadline(now.Add(s.cfg.RequestTimeout))
		if s.feed.stopping() {
			rc.SetWriteDeadline(time.Now().Add(streamEndGrace))
			return false
		}
		_, err := w.Write(buf)
		if err == nil {
			buf = buf[:0]
			err = rc.Flush()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !s.feed.stopping() {
			// A client that went away needs no word; one too slow to
			// take the stream would otherwise leave only an access line
			// that looks like an ordinary end.
			s.log.Info("event stream ended: the client did not take a write within the request timeout", "request_id", infoFrom(r.Context()).id)
		}
		return err == nil
	}
	keepAlive := time.NewTicker(s.cfg.StreamKeepAlive)
	defer keepAlive.Stop()
	// The id the client last got: behind cursor when ?type= left the
	// events since out.
	sent := cursor
	for {
		events, changed, fromTail := s.feed.since(cursor)
		if len(first) > 0 {
			events, first, fromTail = first, nil, false
		} else if !fromTail {
			if events, err = read(cursor); err != nil {
				switch {
				case ctx.Err() != nil:
				case plantstore.ErrorCode(err) == plantstore.EGONE:
					// The feed moved past the stream (a failover's leap):
					// the client's reconnection gets the 410 that says so.
					s.log.Info("event stream ended: the events after its last are gone", "request_id", infoFrom(r.Context()).id, "err", err)
				default:
					s.log.Warn("event stream ended: the store failed", "request_id", infoFrom(r.Context()).id, "err", err)
				}
				return
			}
		}
		for _, e := range events {
			if len(q.types) == 0 || slices.Contains(q.types, e.typ) {
				buf = appendStreamEvent(buf, e)
				sent = e.id
			}
			cursor = e.id
		}
		if len(buf) > 0 && !send() {
			return
		}
		if len(events) > 0 {
			// There may be more already: in the tail, which may have
			// advanced (and closed the changed we hold) while this
			// stream read the store, or in the store. A stream catching
			// up may never find nothing new: it looks for the end here
			// too, or a shutdown would wait out its timeout for it.
			select {
			case <-ctx.Done():
				return
			case <-s.feed.shutdown:
				return
			default:
			}
			continue
		}
		select {
		case <-changed:
		case <-keepAlive.C:
			if cursor != sent {
				// An id without data moves the client's Last-Event-ID
				// past the events its filter left out, and dispatches
				// nothing (the HTML standard's EventSource): reconnecting
				// after they are pruned is not a 410.
				buf = append(buf, "id: "...)
				buf = strconv.AppendInt(buf, cursor, 10)
				buf = append(buf, '\n')
				sent = cursor
			}
			buf = append(buf, ": keep-alive\n\n"...)
			if !send() {
				return
			}
		case <-ctx.Done():
			return
		case <-s.feed.shutdown:
			return
		}
	}
}

// streamEndGrace is how long a stream's last writes may take once the
// shutdown has begun: the end of its response, to a client that reads,
// takes microseconds; a client that stopped reading gets no longer.
const streamEndGrace = 500 * time.Millisecond

// appendStreamEvent appends e as one Server-Sent Event. The JSON has no
// newline, so one data line carries it.
func appendStreamEvent(b []byte, e feedEvent) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, e.id, 10)
	b = append(b, "\nevent: "...)
	b = append(b, e.typ...)
	b = append(b, "\ndata: "...)
	b = append(b, e.data...)
	return append(b, "\n\n"...)
}

// CloseStreams ends every open event stream, and refuses new ones: call
// it when shutting down (http.Server.RegisterOnShutdown), so that
// streams, which never finish by themselves, do not hold the shutdown up.
// Their clients reconnect and resume where they were.
func (s *Server) CloseStreams() { s.feed.close() }

// sentToken says whether the access_token parameter's values hold a
// token: an empty one is none.
func sentToken(values []string) bool {
	return slices.ContainsFunc(values, func(v string) bool { return v != "" })
}

// mayHoldToken says whether a raw query may hold the access_token
// parameter, before the cost of parsing it: by name, or escaped
// (access%5Ftoken), which parsing decodes.
func mayHoldToken(rawQuery string) bool {
	return strings.Contains(rawQuery, "access_token") || strings.Contains(rawQuery, "%")
}
