package httpapi_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/sqlite"
)

// panickingStore stands in for a bug: no real part can be made to panic.
// Tokens still work, so requests reach the plant operations.
type panickingStore struct{ plantstore.Store }

func (panickingStore) CreatePlant(context.Context, plantstore.Plant) (bool, error) {
	panic("a bug in the store")
}
func (panickingStore) GetPlant(context.Context, int64) (plantstore.Plant, error) {
	panic("a bug in the store")
}
func (panickingStore) ListPlants(context.Context, plantstore.ListOptions) ([]plantstore.Plant, error) {
	panic("a bug in the store")
}
func (panickingStore) UpdatePlant(context.Context, plantstore.Plant, plantstore.Precondition) error {
	panic("a bug in the store")
}
func (panickingStore) DeletePlant(context.Context, int64, plantstore.Precondition) error {
	panic("a bug in the store")
}
func (panickingStore) Events(context.Context, plantstore.EventQuery) ([]plantstore.Event, error) {
	panic("a bug in the store")
}

// everyOperation is one well-formed request per plant operation.
var everyOperation = []struct{ method, path, body string }{
	{"GET", "/plants", ""},
	{"POST", "/plants", `{"id":1,"name":"a"}`},
	{"GET", "/plants/1", ""},
	{"PUT", "/plants/1", `{"name":"b"}`},
	{"DELETE", "/plants/1", ""},
	{"GET", "/events", ""},
}

func (e *env) send(method, path, body string, extra map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	header := map[string]string{"Authorization": "Bearer " + e.writeToken, "Content-Type": "application/json"}
	for k, v := range extra {
		header[k] = v
	}
	return e.do(method, path, header, strings.NewReader(body))
}

func TestPanicBecomes500(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{wrap: func(s plantstore.Store) plantstore.Store { return panickingStore{s} }})
		for _, op := range everyOperation {
			resp, body := e.send(op.method, op.path, op.body, nil)
			wantError(t, resp, body, 500, "internal error")
			if strings.Contains(string(body), "bug") {
				t.Errorf("the panic's detail reached the client: %s", body)
			}
		}
		if resp, _ := e.do("GET", "/healthz", nil, nil); resp.StatusCode != 200 {
			t.Errorf("after a panic /healthz answers %d", resp.StatusCode)
		}
		if !strings.Contains(e.logs.String(), "a bug in the store") {
			t.Error("the panic is not in the log")
		}
	})
}

// holdWriteLock takes the store's write lock from another connection, as
// another process would, until the test ends: SQLite's on the file, or on
// PostgreSQL a lock on the plants table that lets reads through and stops
// writes.
func holdWriteLock(t *testing.T, e *env) func() {
	t.Helper()
	if e.dbURL != "" {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, e.dbURL)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE plants IN EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		release := func() {
			tx.Rollback(ctx)
			conn.Close(ctx)
		}
		t.Cleanup(release)
		return release
	}
	// A busy timeout: the server's own background writes (the event
	// pruner at start, token last-use) may hold the lock for a moment.
	other, err := sql.Open("sqlite", "file:"+e.dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	release := func() {
		conn.ExecContext(context.Background(), `ROLLBACK`)
		conn.Close()
		other.Close()
	}
	t.Cleanup(release)
	return release
}

func TestStoreBusyIs503(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{sqlite: sqlite.Options{BusyTimeout: 100 * time.Millisecond}})
		e.create(`{"id":1,"name":"a"}`)
		release := holdWriteLock(t, e)
		for _, op := range everyOperation {
			resp, body := e.send(op.method, op.path, op.body, nil)
			if op.method == "GET" {
				// Readers do not wait for the writer in WAL mode.
				if resp.StatusCode != 200 {
					t.Errorf("%s %s under a write lock: %d %s", op.method, op.path, resp.StatusCode, body)
				}
				continue
			}
			wantError(t, resp, body, 503, "busy")
			if resp.Header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
		}
		release()
		e.api.Delete(context.Background(), 1)
		if resp, body := e.create(`{"id":1,"name":"a"}`); resp.StatusCode != 200 {
			t.Errorf("after the lock is released: %d %s", resp.StatusCode, body)
		}
	})
}

// A store that does not answer holds no request past the request timeout.
func TestRequestTimeoutIs503(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{
			sqlite: sqlite.Options{BusyTimeout: time.Minute},
			cfg:    httpapi.Config{RequestTimeout: 300 * time.Millisecond},
		})
		holdWriteLock(t, e)
		begin := time.Now()
		resp, body := e.create(`{"id":1,"name":"a"}`)
		wantError(t, resp, body, 503)
		if took := time.Since(begin); took > 3*time.Second {
			t.Errorf("answered after %v with a 300ms request timeout", took)
		}
	})
}

// A write answered 503 for its request timeout, behind a lock, is not
// made once the lock goes: a retry finds the store as it was (a
// conditional write does not meet its own change), on both engines.
func TestTimedOutWriteIsNotMade(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{
			sqlite: sqlite.Options{BusyTimeout: time.Minute},
			cfg:    httpapi.Config{RequestTimeout: 300 * time.Millisecond},
		})
		e.create(`{"id":1,"name":"before"}`)
		e.create(`{"id":2,"name":"before"}`)
		etag := map[string]string{}
		for _, path := range []string{"/plants/1", "/plants/2"} {
			resp, _ := e.send("GET", path, "", nil)
			etag[path] = resp.Header.Get("ETag")
		}
		release := holdWriteLock(t, e)
		for _, op := range []struct{ method, path, body string }{
			{"POST", "/plants", `{"id":3,"name":"timed out"}`},
			{"PUT", "/plants/1", `{"name":"timed out"}`},
			{"DELETE", "/plants/2", ""},
		} {
			var header map[string]string
			if op.method != "POST" {
				header = map[string]string{"If-Match": etag[op.path]}
			}
			resp, body := e.send(op.method, op.path, op.body, header)
			wantError(t, resp, body, 503)
		}
		release()
		// A write after them is made after them.
		if resp, body := e.create(`{"id":4,"name":"after"}`); resp.StatusCode != 200 {
			t.Fatalf("a create after the lock: %d %s", resp.StatusCode, body)
		}
		if resp, body := e.send("GET", "/plants/3", "", nil); resp.StatusCode != 404 {
			t.Errorf("the timed-out create was made: %d %s", resp.StatusCode, body)
		}
		if resp, body := e.send("GET", "/plants/1", "", nil); resp.StatusCode != 200 || !strings.Contains(string(body), "before") {
			t.Errorf("the timed-out update was made: %d %s", resp.StatusCode, body)
		}
		if resp, body := e.send("GET", "/plants/2", "", nil); resp.StatusCode != 200 {
			t.Errorf("the timed-out delete was made: %d %s", resp.StatusCode, body)
		}
		// Retried, the conditional update meets the plant it was
		// conditioned on.
		if resp, body := e.send("PUT", "/plants/1", `{"name":"retried"}`, map[string]string{"If-Match": etag["/plants/1"]}); resp.StatusCode != 200 {
			t.Errorf("the update retried with the same If-Match: %d %s", resp.StatusCode, body)
		}
	})
}

// stallingReads stands in for a store whose reads hang (WAL readers never
// wait for SQLite's writer, so no real lock can make them): it waits for
// the request's end, then asks the real store, which answers as it would.
type stallingReads struct{ plantstore.Store }

func (s stallingReads) GetPlant(ctx context.Context, id int64) (plantstore.Plant, error) {
	<-ctx.Done()
	return s.Store.GetPlant(ctx, id)
}

func (s stallingReads) ListPlants(ctx context.Context, opts plantstore.ListOptions) ([]plantstore.Plant, error) {
	<-ctx.Done()
	return s.Store.ListPlants(ctx, opts)
}

func (s stallingReads) Events(ctx context.Context, q plantstore.EventQuery) ([]plantstore.Event, error) {
	<-ctx.Done()
	return s.Store.Events(ctx, q)
}

// Past the request timeout every plant operation answers 503, soon: the
// writes wait on a real lock, the reads on a stalled store.
func TestEveryOperationTimesOutWith503(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{
			sqlite: sqlite.Options{BusyTimeout: time.Minute},
			cfg:    httpapi.Config{RequestTimeout: 300 * time.Millisecond},
			wrap:   func(s plantstore.Store) plantstore.Store { return stallingReads{s} },
		})
		e.create(`{"id":1,"name":"a"}`)
		holdWriteLock(t, e)
		for _, op := range everyOperation {
			begin := time.Now()
			resp, body := e.send(op.method, op.path, op.body, map[string]string{"X-Request-Id": "timeout-" + op.method})
			wantError(t, resp, body, 503)
			if took := time.Since(begin); took > 3*time.Second {
				t.Errorf("%s %s answered after %v", op.method, op.path, took)
			}
			// The token was accepted: the time ran out in the plant operation.
			if !strings.Contains(e.logs.String(), `"request_id":"timeout-`+op.method+`","token":"writer"`) {
				t.Errorf("%s %s did not get past authentication", op.method, op.path)
			}
		}
	})
}

func TestEveryOperationLimitsHeaders(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		for _, op := range everyOperation {
			resp, body := e.send(op.method, op.path, op.body, map[string]string{"X-Big": strings.Repeat("h", 64<<10)})
			wantError(t, resp, body, http.StatusRequestHeaderFieldsTooLarge)
		}
	})
}

func TestStoreFullIs507ReadsGoOn(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		if engineOf(t) == "postgres" {
			t.Skip("SQLite only: a shared PostgreSQL server's disk cannot be filled here; internal/postgres maps disk_full (53100) to EINSUFFICIENT")
		}
		e := start(t, options{sqlite: sqlite.Options{MaxBytes: 96 << 10}})
		name := strings.Repeat("n", 200)
		var resp *http.Response
		var body []byte
		id := 0
		for ; id < 5000; id++ {
			resp, body = e.create(fmt.Sprintf(`{"id":%d,"name":%q}`, id, name))
			if resp.StatusCode != 200 {
				break
			}
		}
		wantError(t, resp, body, http.StatusInsufficientStorage, "space")
		if got := resp.Header.Get("Retry-After"); got != "60" {
			t.Errorf("507 with Retry-After %q, want 60: a full store seldom has space again within a second", got)
		}
		if _, ok := e.stored(int64(id)); ok {
			t.Error("the refused plant was stored")
		}
		if _, ok := e.stored(0); !ok {
			t.Error("a plant stored before the store filled is gone")
		}
		if resp, _ := e.do("GET", "/readyz", nil, nil); resp.StatusCode != 200 {
			t.Errorf("readyz on a full store: %d", resp.StatusCode)
		}
		// Growing a stored plant needs space too; the plant stays as it was.
		long := fmt.Sprintf(`{"name":%q,"tag":%q}`, strings.Repeat("m", 200), strings.Repeat("t", 100))
		for i := range id {
			resp, body = e.send("PUT", fmt.Sprint("/plants/", i), long, nil)
			if resp.StatusCode != 200 {
				break
			}
		}
		wantError(t, resp, body, http.StatusInsufficientStorage)
		if resp, body := e.send("GET", "/plants?limit=1000", "", nil); resp.StatusCode != 200 {
			t.Errorf("a listing on a full store: %d %s", resp.StatusCode, body)
		}
		// Deleting is how a full store is emptied, though each delete
		// writes its event: every stored plant can go.
		for i := range id {
			if resp, body := e.send("DELETE", fmt.Sprint("/plants/", i), "", nil); resp.StatusCode != 204 {
				t.Fatalf("delete plant %d of %d on a full store: %d %s", i, id, resp.StatusCode, body)
			}
		}
		if resp, body := e.send("GET", "/plants?limit=1000", "", nil); resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "[]" {
			t.Errorf("a listing after deleting every plant: %d %s", resp.StatusCode, body)
		}
	})
}

func TestReadyzWhenStoreIsGone(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		if resp, _ := e.do("GET", "/readyz", nil, nil); resp.StatusCode != 200 {
			t.Fatalf("readyz: %d", resp.StatusCode)
		}
		e.db.Close()
		resp, body := e.do("GET", "/readyz", nil, nil)
		wantError(t, resp, body, 503)
		if resp, _ := e.do("GET", "/healthz", nil, nil); resp.StatusCode != 200 {
			t.Errorf("healthz with the store gone: %d", resp.StatusCode)
		}
	})
}

// unavailableStore stands in for a store whose database is down (the real
// outages are the engines' tests): every read fails as unavailable.
type unavailableStore struct{ plantstore.Store }

func (unavailableStore) GetPlant(context.Context, int64) (plantstore.Plant, error) {
	return plantstore.Plant{}, plantstore.WrapError(plantstore.EUNAVAILABLE, "the store cannot be reached", errors.New("dial tcp: connection refused"))
}

// In an outage every request fails alike: the error log gets one line a
// second, each counting those held back with it, while the access log
// keeps a line a request. The last second's count is written when the
// second ends, or at shutdown if that comes first.
func TestOutageErrorsLoggedOnceASecond(t *testing.T) {
	outage := options{wrap: func(s plantstore.Store) plantstore.Store { return unavailableStore{s} }}
	errorLines := func(e *env) []map[string]any {
		var lines []map[string]any
		for _, line := range strings.Split(e.logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "request failed" {
				lines = append(lines, m)
			}
		}
		return lines
	}
	// counted is how many failed requests the error lines account for.
	counted := func(lines []map[string]any) int {
		n := 0
		for _, l := range lines {
			n++
			if like, ok := l["more_like_it"].(float64); ok {
				n += int(like)
			}
		}
		return n
	}
	burst := func(e *env, n int) time.Duration {
		began := time.Now()
		for range n {
			resp, body := e.send("GET", "/plants/1", "", nil)
			wantError(t, resp, body, 503, "cannot be reached")
		}
		return time.Since(began)
	}

	e := start(t, outage)
	took := burst(e, 200)
	if n, most := len(errorLines(e)), int(took/time.Second)+2; n == 0 || n > most {
		t.Fatalf("%d error lines for 200 failed requests in %v, want one a second", n, took.Round(time.Millisecond))
	}
	// No request follows: the second's end writes what it held back.
	deadline := time.Now().Add(3 * time.Second)
	for counted(errorLines(e)) < 200 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	lines := errorLines(e)
	if got := counted(lines); got != 200 {
		t.Errorf("the error lines count %d failed requests 2 s after the burst, want all 200", got)
	}
	if last := lines[len(lines)-1]; !strings.Contains(fmt.Sprint(last["err"]), "connection refused") || last["request_id"] == nil || last["status"] != float64(503) {
		t.Errorf("last error line %v, want the cause, the request id and the status", last)
	}
	if n := strings.Count(e.logs.String(), `"status":503`); n < 200 {
		t.Errorf("%d log lines with status 503, want an access log line for each of the 200 requests", n)
	}
	// A second outage a second on is counted again from one line.
	time.Sleep(1100 * time.Millisecond)
	burst(e, 50)
	e.stop()
	if got := counted(errorLines(e)); got != 250 {
		t.Errorf("after a shutdown right after a second burst, the error lines count %d failed requests, want 250", got)
	}

	// A bug is logged every time.
	e2 := start(t, options{wrap: func(s plantstore.Store) plantstore.Store { return panickingStore{s} }})
	for range 5 {
		e2.send("GET", "/plants/1", "", nil)
	}
	if n := strings.Count(e2.logs.String(), `"msg":"request failed"`); n != 5 {
		t.Errorf("%d error lines for 5 internal errors, want 5", n)
	}
}

// failingEvents is a store whose change feed cannot be read while down is
// set, as in a database outage that leaves the writes' path to the test.
type failingEvents struct {
	plantstore.Store
	down *atomic.Bool
}

func (s failingEvents) Events(ctx context.Context, q plantstore.EventQuery) ([]plantstore.Event, error) {
	if s.down.Load() {
		return nil, plantstore.Errorf(plantstore.EUNAVAILABLE, "the store cannot be reached")
	}
	return s.Store.Events(ctx, q)
}

// The streams' reader retries at every write and poll; an outage of the
// feed is said once, not at every retry, and its end is said too.
func TestFeedOutageLoggedOnce(t *testing.T) {
	var down atomic.Bool
	e := start(t, options{wrap: func(s plantstore.Store) plantstore.Store { return failingEvents{s, &down} }})
	s := e.openStream(e.readToken, "", nil)
	e.create(`{"id":1,"name":"before"}`)
	s.next()
	down.Store(true)
	for i := range 20 {
		e.create(fmt.Sprintf(`{"id":%d,"name":"during"}`, i+2))
		time.Sleep(10 * time.Millisecond)
	}
	down.Store(false)
	e.create(`{"id":100,"name":"after"}`)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(e.logs.String(), "works again"); {
		if time.Now().After(deadline) {
			t.Fatalf("no line says the feed is read again:\n%s", e.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := strings.Count(e.logs.String(), `"msg":"event streams: cannot read new events; retrying at the next poll"`); n != 1 {
		t.Errorf("%d lines for the outage, want 1:\n%s", n, e.logs)
	}
}
