package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/client"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/auth"
	"github.com/plantstore/plantstore/internal/httpapi"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
	"github.com/plantstore/plantstore/internal/sqlite"
)

// engineVar names the engine these tests run on: sqlite (the default) or
// postgres.
const engineVar = "PLANTSTORE_TEST_ENGINE"

func engine() string {
	if os.Getenv(engineVar) == "postgres" {
		return "postgres"
	}
	return "sqlite"
}

// TestMain runs the suite on SQLite, then, when a PostgreSQL server is
// given (pgtest.EnvVar), runs this same test binary again on PostgreSQL:
// one suite, both engines. Each run fails if some answer the document
// promises was never received: the status table is covered or the suite
// says so.
func TestMain(m *testing.M) {
	code := m.Run()
	code = checkCoverage(code)
	if code == 0 && os.Getenv(engineVar) == "" && os.Getenv(pgtest.EnvVar) != "" {
		code = rerunOnPostgres()
	}
	os.Exit(code)
}

// rerunOnPostgres runs this test binary again, with the same flags, on
// PostgreSQL, and returns its exit code.
func rerunOnPostgres() int {
	fmt.Println("=== the same suite again, on PostgreSQL")
	var args []string
	for _, a := range os.Args[1:] {
		// The go command's record of what the tests read is the first run's.
		if !strings.HasPrefix(a, "-test.testlogfile") {
			args = append(args, a)
		}
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), engineVar+"=postgres")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			return exit.ExitCode()
		}
		fmt.Println("rerun on PostgreSQL:", err)
		return 1
	}
	return 0
}

func checkCoverage(code int) int {
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && !testing.Short() {
		c, err := apitest.Load()
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		var missing []string
		for _, u := range c.Unseen() {
			if reason, ok := notReachable[u]; ok {
				fmt.Printf("not covered here: %s (%s)\n", u, reason)
				continue
			}
			if reason, ok := notReachableOnPostgres[u]; ok && engine() == "postgres" {
				fmt.Printf("not covered here: %s (%s)\n", u, reason)
				continue
			}
			missing = append(missing, u)
		}
		if len(missing) > 0 {
			fmt.Println("FAIL: documented answers that no test received:")
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
}

// start runs the API as serve does, on a real loopback listener over a
// real SQLite file, or a fresh PostgreSQL database in a run on PostgreSQL.
func start(t *testing.T, opts options) *env {
	t.Helper()
	var db plantstore.Store
	var dbPath, dbURL string
	var err error
	if engine() == "postgres" {
		dbURL = pgtest.NewDatabase(t)
		db, err = postgres.Open(context.Background(), dbURL, postgres.Options{LockTimeout: opts.sqlite.BusyTimeout})
	} else {
		dbPath = filepath.Join(t.TempDir(), "plants.db")
		opts.sqlite.SoleServer = true // as serve opens it
		db, err = sqlite.Open(context.Background(), dbPath, opts.sqlite)
	}
	if err != nil {
		t.Fatal(err)
	}
	var store plantstore.Store = db
	if opts.wrap != nil {
		store = opts.wrap(db)
	}
	logs := &apitest.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	opts.cfg.Logger = log
	authn := auth.New(store, auth.Options{CacheTTL: opts.authTTL})
	srv := httpapi.NewHTTPServer(httpapi.NewServer(store, authn, opts.cfg), opts.limits)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(httpapi.JSONErrorListener(ln, log))
	t.Cleanup(func() {
		srv.Close()
		db.Close()
	})
	e := &env{t: t, url: "http://" + ln.Addr().String(), addr: ln.Addr().String(), db: db, dbPath: dbPath, dbURL: dbURL, client: apitest.Client(t), logs: logs}
	e.writeToken = e.issue("writer", plantstore.KnownScopes...)
	e.readToken = e.issue("reader", plantstore.ScopePlantsRead)
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
	if !strings.HasPrefix(path, "/") {
		path = "/"
	}
	req, _ := http.NewRequest(method, "http://"+conn.RemoteAddr().String()+path, nil)
	if req == nil {
		req, _ = http.NewRequest("GET", "http://"+conn.RemoteAddr().String()+"/", nil)
	}
	return resp, apitest.CheckRaw(t, req, resp)
}
