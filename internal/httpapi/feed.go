package httpapi

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/faultlog"
)

// feed serves the open event streams of this process from one reader of
// the store. While any stream is open, a goroutine reads each new event
// once, when the store says events were written (Config.EventsWritten,
// which on PostgreSQL also fires for other instances' writes) or at the
// latest every poll, encodes it once, and keeps the newest in a tail in
// memory; the streams that have caught up take their events from there.
// A hundred streams then cost one read of the store per commit, not a
// hundred. A stream further behind than the tail reads the store itself
// until it catches up.
type feed struct {
	store   plantstore.EventStore
	written <-chan struct{}
	poll    time.Duration
	timeout time.Duration // of each read of the store: the request timeout
	log     *slog.Logger
	// faults says the reader's failures, which it retries at each poll,
	// once a minute while the store is away.
	faults *faultlog.Task

	mu      sync.Mutex
	streams int  // open
	running bool // the reader runs
	// tail holds every event with an id in (from, latest], encoded, in id
	// order; from == latest when it holds none. Valid while running.
	tail         []feedEvent
	from, latest int64
	// changed is closed, and replaced, when latest advances, and at
	// shutdown.
	changed  chan struct{}
	shutdown chan struct{} // closed by close
	closed   bool
}

// feedEvent is an event as a stream sends it.
type feedEvent struct {
	id   int64
	typ  string
	data []byte // the event's JSON
}

// maxTail bounds the events kept in memory for the streams.
const maxTail = 4096

// feedPage is how many events the reader, or a stream behind the tail,
// reads from the store at once.
const feedPage = 1000

func newFeed(store plantstore.EventStore, written <-chan struct{}, poll, timeout time.Duration, log *slog.Logger) *feed {
	return &feed{store: store, written: written, poll: poll, timeout: timeout, log: log,
		faults:  &faultlog.Task{Log: log, Msg: "event streams: cannot read new events; retrying at the next poll"},
		changed: make(chan struct{}), shutdown: make(chan struct{})}
}

// open registers a stream, starting the reader if it is the first. It
// returns false once the feed is closed.
func (f *feed) open() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.streams++
	if !f.running {
		f.running = true
		f.tail, f.from, f.latest = nil, -1, -1 // nothing known until the reader's first read
		go f.read()
	}
	return true
}

// done unregisters a stream; the reader stops with the last.
func (f *feed) done() {
	f.mu.Lock()
	f.streams--
	f.mu.Unlock()
}

// close ends every stream, for shutdown: their clients reconnect, to
// another instance or this one's successor, and resume.
func (f *feed) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.shutdown)
	}
}

// stopping says whether close has been called.
func (f *feed) stopping() bool {
	select {
	case <-f.shutdown:
		return true
	default:
		return false
	}
}

// read runs while streams are open: it brings the tail up to the store's
// newest event after every wake-up or poll.
func (f *feed) read() {
	ticker := time.NewTicker(f.poll)
	defer ticker.Stop()
	for {
		f.catchUp()
		select {
		case <-f.written:
		case <-ticker.C:
		case <-f.shutdown:
		}
		f.mu.Lock()
		if f.streams == 0 || f.closed {
			f.running = false
			f.tail = nil
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
	}
}

// catchUp reads the events after the tail's newest into it.
func (f *feed) catchUp() {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	f.mu.Lock()
	latest := f.latest
	f.mu.Unlock()
	if latest < 0 {
		// The first read: the tail starts at the newest event.
		id, err := f.store.LatestEventID(ctx)
		if err != nil {
			f.faults.Failed(err, "reading", "the newest event id")
			return
		}
		f.advance(nil, id, true)
		latest = id
	}
	for {
		events, err := f.store.Events(ctx, plantstore.EventQuery{After: latest, Limit: feedPage})
		if plantstore.ErrorCode(err) == plantstore.EGONE {
			// Pruned past the tail (the reader stalled for the whole
			// retention): start again at the newest; streams behind
			// the tail read the store, and find out.
			f.mu.Lock()
			f.latest = -1
			f.mu.Unlock()
			return
		}
		if err != nil {
			f.faults.Failed(err)
			return
		}
		f.faults.Worked()
		if len(events) == 0 {
			return
		}
		encoded := make([]feedEvent, len(events))
		for i, e := range events {
			encoded[i] = encodeEvent(e)
		}
		latest = events[len(events)-1].ID
		f.advance(encoded, latest, false)
		if len(events) < feedPage {
			return
		}
	}
}

// advance appends events, which follow the tail, and tells the streams.
// reset starts the tail afresh, empty at latest.
func (f *feed) advance(events []feedEvent, latest int64, reset bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if reset {
		f.tail, f.from = nil, latest
	}
	f.tail = append(f.tail, events...)
	if over := len(f.tail) - maxTail; over > 0 {
		f.from = f.tail[over-1].id
		// A new array, so that streams holding a slice of the old one
		// keep it, and the old one is freed once they let go.
		f.tail = slices.Clone(f.tail[over:])
	}
	f.latest = latest
	close(f.changed)
	f.changed = make(chan struct{})
}

// since returns the events after cursor from the tail, and a channel
// closed when there may be more. ok is false when the tail does not reach
// back to cursor (or is not read yet): the stream reads the store.
func (f *feed) since(cursor int64) (events []feedEvent, changed <-chan struct{}, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.latest < 0 || cursor < f.from {
		return nil, f.changed, false
	}
	i, _ := slices.BinarySearchFunc(f.tail, cursor+1, func(e feedEvent, id int64) int { return cmp.Compare(e.id, id) })
	return f.tail[i:len(f.tail):len(f.tail)], f.changed, true
}
