package main

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/plantstore/plantstore/internal/flush"
)

// The bare baseline: what any HTTP service of this API's shape must do at
// the least, with no storage. It checks the bearer header, decodes and
// validates the JSON body, and encodes an answer. The harness runs it in a
// process of its own, as it runs plantstore, so both pay the same costs
// of loopback and scheduling.

type baselinePlant struct {
	ID   *int64  `json:"id,omitempty"`
	Name *string `json:"name"`
	Tag  *string `json:"tag,omitempty"`
}

// baselineHandler serves the bare baseline; with a log, its creates are
// durable (durableLog) before they are answered.
func baselineHandler(token string, log *durableLog) http.Handler {
	want := []byte("Bearer " + token)
	fail := func(w http.ResponseWriter, status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"error": status, "message": msg})
	}
	// authorized answers 401 unless the request carries the token.
	authorized := func(next http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				fail(w, 401, "unauthorized")
				return
			}
			next(w, r)
		}
	}
	name, tag := "a fixed plant", "fixed"
	fixed := baselinePlant{ID: new(int64), Name: &name, Tag: &tag}
	page := make([]baselinePlant, 100)
	for i := range page {
		id := int64(i + 1)
		page[i] = baselinePlant{ID: &id, Name: &name, Tag: &tag}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /plants", authorized(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			fail(w, 415, "unsupported media type")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
		if err != nil {
			fail(w, 413, "too large")
			return
		}
		var p baselinePlant
		if err := json.Unmarshal(body, &p); err != nil || p.ID == nil || p.Name == nil {
			fail(w, 400, "bad plant")
			return
		}
		if n := utf8.RuneCountInString(*p.Name); n < 1 || n > 200 || (p.Tag != nil && utf8.RuneCountInString(*p.Tag) > 100) {
			fail(w, 400, "bad length")
			return
		}
		if log != nil {
			if err := log.append(body); err != nil {
				fail(w, 500, "not stored")
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(baselinePlant{Name: p.Name, Tag: p.Tag})
	}))
	mux.HandleFunc("GET /plants/{id}", authorized(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(fixed)
	}))
	mux.HandleFunc("GET /plants", authorized(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(page)
	}))
	if log != nil {
		// The harness reads its mean batch here, as plantstore's from its
		// metrics.
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "durable_baseline_batch_size_sum %d\ndurable_baseline_batch_size_count %d\n", log.appended.Load(), log.batches.Load())
		})
	}
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ready"}`)
	})
	return mux
}

// serveBaseline is the baseline process: it listens on loopback, says
// where on stdout, and serves until killed. With a dir, it is the durable
// baseline: its creates are made durable in a log there.
func serveBaseline(token, dir string) error {
	var log *durableLog
	if dir != "" {
		var err error
		if log, err = openDurableLog(filepath.Join(dir, "creates.log")); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println("gomaxprocs", runtime.GOMAXPROCS(0)) // for the harness's output
	fmt.Println("listening", ln.Addr().String())
	return http.Serve(ln, baselineHandler(token, log))
}

// durableLog is the least a server can do to make a create durable
// before it answers 200: the bodies of the creates that arrive together
// written to a file in one write and synced by one fdatasync (group
// commit), through the same AIO sync plantstore's writer uses
// (internal/flush). No database, no index, no read of what was stored.
// The file is a ring, written over from the start once full, and
// preallocated with zeros and synced first, so that a sync never has to
// record a new size or a new block (as a SQLite WAL, reused after its
// checkpoints). The harness measures plantstore against it to tell the
// cost of durability on the machine from the cost of the rest.
type durableLog struct {
	f      *os.File
	syncer *flush.Syncer
	queue  chan logEntry
	// appended and batches count the creates and batches synced.
	appended, batches atomic.Int64
}

type logEntry struct {
	body []byte
	done chan error
}

// durableLogSize is the ring's size: about a SQLite WAL's between two
// checkpoints (1,000 pages of 4 KiB).
const durableLogSize = 4 << 20

func openDurableLog(path string) (*durableLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(make([]byte, durableLogSize)); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	l := &durableLog{f: f, syncer: flush.New(f), queue: make(chan logEntry, 1024)}
	go l.commit()
	return l, nil
}

// append returns once body is on stable storage.
func (l *durableLog) append(body []byte) error {
	done := make(chan error, 1)
	l.queue <- logEntry{body: body, done: done}
	return <-done
}

// commit writes and syncs what is queued, a batch at a time. Before each
// batch it yields while yielding brings more (8 times at most; plantstore's
// writer, 16), as plantstore's writer does, so that on one P the handlers
// that are ready queue theirs first.
func (l *durableLog) commit() {
	var batch []logEntry
	var buf []byte
	var at int64
	for first := range l.queue {
		batch = drainLog(l.queue, append(batch[:0], first))
		for range 8 {
			n := len(batch)
			runtime.Gosched()
			if batch = drainLog(l.queue, batch); len(batch) == n {
				break
			}
		}
		buf = buf[:0]
		for _, e := range batch {
			buf = append(append(buf, e.body...), '\n')
		}
		if at+int64(len(buf)) > durableLogSize {
			at = 0
		}
		_, err := l.f.WriteAt(buf, at)
		at += int64(len(buf))
		if err == nil {
			err = l.syncer.Sync()
		}
		l.appended.Add(int64(len(batch)))
		l.batches.Add(1)
		for _, e := range batch {
			e.done <- err
		}
	}
}

func drainLog(queue chan logEntry, batch []logEntry) []logEntry {
	for {
		select {
		case e := <-queue:
			batch = append(batch, e)
		default:
			return batch
		}
	}
}
