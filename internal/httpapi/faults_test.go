package httpapi_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/sqlite"
)

// panickingStore stands in for a bug: no real part can be made to panic.
type panickingStore struct{ plantstore.Store }

func (panickingStore) CreatePlant(context.Context, plantstore.Plant) (bool, error) {
	panic("a bug in the store")
}

func TestPanicBecomes500(t *testing.T) {
	e := start(t, options{wrap: func(s plantstore.Store) plantstore.Store { return panickingStore{s} }})
	resp, body := e.create(`{"id":1,"name":"a"}`)
	wantError(t, resp, body, 500, "internal error")
	if strings.Contains(string(body), "bug") {
		t.Errorf("the panic's detail reached the client: %s", body)
	}
	if resp, _ := e.do("GET", "/healthz", nil, nil); resp.StatusCode != 200 {
		t.Errorf("after a panic /healthz answers %d", resp.StatusCode)
	}
	if !strings.Contains(e.logs.String(), "a bug in the store") {
		t.Error("the panic is not in the log")
	}
}

// holdWriteLock takes SQLite's write lock on the server's file from another
// connection, as another process would, until the test ends.
func holdWriteLock(t *testing.T, e *env) func() {
	t.Helper()
	other, err := sql.Open("sqlite", "file:"+e.dbPath)
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
	e := start(t, options{sqlite: sqlite.Options{BusyTimeout: 100 * time.Millisecond}})
	release := holdWriteLock(t, e)
	resp, body := e.create(`{"id":1,"name":"a"}`)
	wantError(t, resp, body, 503, "busy")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	release()
	if resp, body := e.create(`{"id":1,"name":"a"}`); resp.StatusCode != 200 {
		t.Errorf("after the lock is released: %d %s", resp.StatusCode, body)
	}
}

// A store that does not answer holds no request past the request timeout.
func TestRequestTimeoutIs503(t *testing.T) {
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
}

func TestStoreFullIs507ReadsGoOn(t *testing.T) {
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
	if _, ok := e.stored(int64(id)); ok {
		t.Error("the refused plant was stored")
	}
	if _, ok := e.stored(0); !ok {
		t.Error("a plant stored before the store filled is gone")
	}
	if resp, _ := e.do("GET", "/readyz", nil, nil); resp.StatusCode != 200 {
		t.Errorf("readyz on a full store: %d", resp.StatusCode)
	}
}

func TestReadyzWhenStoreIsGone(t *testing.T) {
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
}
