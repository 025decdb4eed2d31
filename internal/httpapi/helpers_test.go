package httpapi_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/client"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/app"
	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
	"github.com/plantstore/plantstore/internal/sqlite"
)

// The storage engines every HTTP test runs on, each as a subtest named
// for it ("TestCreate/sqlite", "TestCreate/postgres"), so results and -run
// filters say which engine they are about. PostgreSQL is there when a
// server is given (pgtest.EnvVar); TestMain says once when it is not.
const (
	onSQLite   = "sqlite"
	onPostgres = "postgres"
)

func engines() []string {
	if os.Getenv(pgtest.EnvVar) == "" {
		return []string{onSQLite}
	}
	return []string{onSQLite, onPostgres}
}

// eachEngine runs test once per engine, as subtests named for them, side
// by side: each has a store and a listener of its own.
func eachEngine(t *testing.T, test func(t *testing.T)) {
	for _, eng := range engines() {
		t.Run(eng, func(t *testing.T) {
			t.Parallel()
			test(t)
		})
	}
}

// engineOf is the engine a test runs on, read from its name: a test under
// a "postgres" subtest runs on PostgreSQL, any other on SQLite.
func engineOf(t testing.TB) string {
	if slices.Contains(strings.Split(t.Name(), "/"), onPostgres) {
		return onPostgres
	}
	return onSQLite
}

// TestMain runs the suite; then, for each engine whose tests all ran, it
// fails if some answer the document promises was never received on that
// engine: the status table is covered, per engine, or the suite says so.
func TestMain(m *testing.M) {
	apitest.GroupOf = engineOf
	if os.Getenv(pgtest.EnvVar) == "" {
		fmt.Printf("the HTTP tests run on SQLite only: %s is not set (start a server with `eval \"$(bash .ci/postgres.sh)\"`)\n", pgtest.EnvVar)
	}
	code := m.Run()
	os.Exit(checkCoverage(code))
}

// checkCoverage applies the coverage gate to the engines whose every test
// ran: all of them when no -run filter was given, one when the filter is
// "/sqlite" or "/postgres".
func checkCoverage(code int) int {
	if code != 0 || testing.Short() {
		return code
	}
	var gated []string
	switch filter := flag.Lookup("test.run").Value.String(); filter {
	case "":
		gated = engines()
	case "/" + onSQLite, "/" + onPostgres:
		if eng := filter[1:]; slices.Contains(engines(), eng) {
			gated = []string{eng}
		}
	}
	c, err := apitest.Load()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	for _, eng := range gated {
		var missing []string
		for _, u := range c.Unseen(eng) {
			if reason, ok := notReachable[u]; ok {
				fmt.Printf("not covered on %s: %s (%s)\n", eng, u, reason)
				continue
			}
			if reason, ok := notReachableOnPostgres[u]; ok && eng == onPostgres {
				fmt.Printf("not covered on %s: %s (%s)\n", eng, u, reason)
				continue
			}
			missing = append(missing, u)
		}
		if len(missing) > 0 {
			fmt.Printf("FAIL: documented answers that no test received on %s:\n", eng)
			for _, u := range missing {
				fmt.Println("   ", u)
			}
			code = 1
		}
	}
	return code
}

// notReachable are documented answers these tests cannot cause, each with
// the reason. Keep it short: every entry is a gap in the proof.
var notReachable = map[string]string{
	"DELETE /plants/{id} 507": "a delete never grows the file, so only a really full disk causes it; the store maps SQLITE_FULL the same for every write (TestFullIsInsufficient)",
}

// notReachableOnPostgres are answers only SQLite's tests can cause here.
var notReachableOnPostgres = map[string]string{
	"POST /plants 507":     "a full disk cannot be simulated for a shared PostgreSQL server; SQLite's run covers the mapping (TestStoreFullIs507ReadsGoOn), and internal/postgres tests map 53100 to EINSUFFICIENT",
	"PUT /plants/{id} 507": "as for POST",
}

type options struct {
	cfg    httpapi.Config
	limits httpapi.ServerLimits
	// sqlite's BusyTimeout is PostgreSQL's LockTimeout in a run on
	// PostgreSQL; its MaxBytes has no PostgreSQL counterpart.
	sqlite  sqlite.Options
	wrap    func(plantstore.Store) plantstore.Store
	authTTL time.Duration
	// rosterInterval is how often the active tokens' hashes are read
	// (app.Config.TokenRosterInterval).
	rosterInterval time.Duration
	// dbURL, under a "postgres" subtest, is the database to serve instead
	// of a fresh one: another instance's.
	dbURL string
	// eventRetention is app.Config.EventRetention.
	eventRetention time.Duration
	// shutdownTimeout is app.Config.ShutdownTimeout; 100 ms when zero.
	shutdownTimeout time.Duration
}

type env struct {
	t          *testing.T
	url        string
	addr       string
	db         plantstore.Store
	dbPath     string // SQLite's file
	dbURL      string // PostgreSQL's database
	client     *http.Client
	api        *client.Client // with writeToken
	logs       *apitest.Buffer
	writeToken string // plants:read and plants:write
	readToken  string // plants:read only
	// stop shuts the service down as a signal would, and waits for it.
	stop func()
}

// start runs the service as serve does, through internal/app, on a real
// loopback listener over a real SQLite file, or a fresh PostgreSQL
// database under a "postgres" subtest. The options map onto app.Config.
func start(t *testing.T, opts options) *env {
	t.Helper()
	logs := &apitest.Buffer{}
	cfg := app.Config{
		Store:               app.StoreConfig{BusyTimeout: opts.sqlite.BusyTimeout, MaxDBBytes: opts.sqlite.MaxBytes},
		API:                 opts.cfg,
		Server:              opts.limits,
		Logger:              slog.New(slog.NewJSONHandler(logs, nil)),
		AccessLog:           logs, // as serve writes it
		TokenCacheTTL:       opts.authTTL,
		TokenRosterInterval: opts.rosterInterval,
		WrapStore:           opts.wrap,
		ShutdownTimeout:     cmp.Or(opts.shutdownTimeout, 100*time.Millisecond), // a test's slow clients need not be waited for
		EventRetention:      opts.eventRetention,
	}
	var dbPath, dbURL string
	if engineOf(t) == onPostgres {
		dbURL = opts.dbURL
		if dbURL == "" {
			dbURL = pgtest.NewDatabase(t)
		}
		cfg.Store.DB = dbURL
	} else {
		dbPath = filepath.Join(t.TempDir(), "plants.db")
		cfg.Store.DB = dbPath
	}
	listening := make(chan struct{})
	cfg.OnListening = func() { close(listening) }
	a, err := app.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	// The tokens below are made once the server has read its roster of
	// active tokens (before it says it listens), so they are not on it
	// until its next reading (options.rosterInterval): to the
	// failed-authentication throttle, tokens it has never seen.
	select {
	case <-listening:
	case err := <-served:
		a.Close()
		t.Fatalf("Serve: %v", err)
	}
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			cancel()
			<-served
		})
	}
	t.Cleanup(func() {
		stop()
		a.Close()
	})
	e := &env{t: t, url: "http://" + ln.Addr().String(), addr: ln.Addr().String(), db: a.Store(), dbPath: dbPath, dbURL: dbURL, client: apitest.Client(t), logs: logs, stop: stop}
	// Another instance's database has its "writer" and "reader" already.
	suffix := ""
	if opts.dbURL != "" {
		suffix = "-" + ln.Addr().String()
	}
	e.writeToken = e.issue("writer"+suffix, plantstore.KnownScopes...)
	e.readToken = e.issue("reader"+suffix, plantstore.ScopePlantsRead)
	e.api = e.clientWith(e.writeToken)
	return e
}

// clientWith returns our public client, with token, whose every response is
// checked against the contract.
func (e *env) clientWith(token string) *client.Client {
	e.t.Helper()
	c, err := client.New(e.url, token, client.WithHTTPClient(e.client))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) issue(name string, scopes ...string) string {
	e.t.Helper()
	secret := plantstore.NewToken()
	if _, err := e.db.CreateToken(context.Background(), plantstore.Token{Name: name, Scopes: scopes}, plantstore.HashToken(secret)); err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// do sends a request; header values of "" are left out.
func (e *env) do(method, path string, header map[string]string, body io.Reader) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, b
}

// create POSTs body as JSON with the write token.
func (e *env) create(body string) (*http.Response, []byte) {
	e.t.Helper()
	return e.do("POST", "/plants", map[string]string{
		"Authorization": "Bearer " + e.writeToken,
		"Content-Type":  "application/json",
	}, strings.NewReader(body))
}

func (e *env) stored(id int64) (plantstore.Plant, bool) {
	e.t.Helper()
	p, err := e.db.GetPlant(context.Background(), id)
	if plantstore.ErrorCode(err) == plantstore.ENOTFOUND {
		return plantstore.Plant{}, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return p, true
}

type errorBody struct {
	Error   int    `json:"error"`
	Message string `json:"message"`
}

// wantError checks status and that the Error message mentions each of
// words (the contract checker has already checked its shape).
func wantError(t *testing.T, resp *http.Response, body []byte, status int, words ...string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, body)
	}
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	for _, w := range words {
		if !strings.Contains(e.Message, w) {
			t.Errorf("message %q does not mention %q", e.Message, w)
		}
	}
}

// raw sends bytes on a fresh connection and reads one response, for
// requests no http.Client would send.
func (e *env) raw(request string) (*http.Response, []byte) {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		e.t.Fatal(err)
	}
	return readRaw(e.t, conn, request)
}

func readRaw(t *testing.T, conn net.Conn, request string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	method, rest, _ := strings.Cut(request, " ")
	path, _, _ := strings.Cut(rest, " ")
	if u, err := url.Parse(path); err == nil && u.Scheme != "" && u.Host != "" {
		path = u.RequestURI() // an absolute-form target
	}
	if !strings.HasPrefix(path, "/") {
		path = "/"
	}
	req, _ := http.NewRequest(method, "http://"+conn.RemoteAddr().String()+path, nil)
	if req == nil {
		req, _ = http.NewRequest("GET", "http://"+conn.RemoteAddr().String()+"/", nil)
	}
	return resp, apitest.CheckRaw(t, req, resp)
}
