package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
)

// These tests run several built binaries on one PostgreSQL database, as a
// deployment behind a load balancer would. They skip unless
// PLANTSTORE_TEST_POSTGRES names a server (see internal/postgres/pgtest).

// pgClient checks every answer against the contract and never waits long:
// a hang is a failure, not a stuck test.
func pgClient(t *testing.T) *http.Client {
	c := apitest.Client(t)
	c.Timeout = 10 * time.Second
	return c
}

// answer is what a request got, err set when no answer came.
type answer struct {
	status      int
	body        string
	contentType string
	took        time.Duration
	err         error
}

func (a answer) String() string {
	if a.err != nil {
		return fmt.Sprintf("no answer after %v: %v", a.took.Round(time.Millisecond), a.err)
	}
	return fmt.Sprintf("%d %s (%v)", a.status, strings.TrimSpace(a.body), a.took.Round(time.Millisecond))
}

// do sends a request; it never fails the test itself, so goroutines may
// call it.
func do(client *http.Client, method, url, token, body string) answer {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return answer{err: err}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return answer{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(b), contentType: resp.Header.Get("Content-Type"), took: time.Since(start), err: err}
}

// startServes starts n "plantstore serve" at once, all on db, and waits
// until each listens. Unlike serve, it does not wait for one to listen
// before starting the next, so their start-ups (and migrations) overlap.
func startServes(t *testing.T, n int, db string, args ...string) []*server {
	t.Helper()
	return startOn(t, launch, n, db, args...)
}

// startServeProcesses is startServes with processes of the binary, for
// tests that kill one.
func startServeProcesses(t *testing.T, n int, db string, args ...string) []*server {
	t.Helper()
	return startOn(t, launchProcess, n, db, args...)
}

func startOn(t *testing.T, launch func(*testing.T, string, ...string) (*server, chan string), n int, db string, args ...string) []*server {
	t.Helper()
	servers := make([]*server, n)
	addrs := make([]chan string, n)
	for i := range n {
		servers[i], addrs[i] = launch(t, t.TempDir(), append([]string{"--db", db}, args...)...)
	}
	for i, s := range servers {
		s.await(t, addrs[i], 30*time.Second)
	}
	return servers
}

// logsOf shows every server's log, for a failure message.
func logsOf(servers ...*server) string {
	var b strings.Builder
	for i, s := range servers {
		fmt.Fprintf(&b, "--- log of serve %d (%s):\n%s", i, s.url, s.logs)
	}
	return b.String()
}

func pgToken(t *testing.T, db, name string) string {
	t.Helper()
	return mustToken(t, t.TempDir(), "--name", name, "--db", db)
}

// TestPostgresScaleOut runs three servers on one database: they agree on
// a contested create, see each other's writes, honour a revocation made
// beside them, and losing one loses no acknowledged plant.
func TestPostgresScaleOut(t *testing.T) {
	db := pgtest.NewDatabase(t)
	servers := startServeProcesses(t, 3, db) // one is killed
	token := pgToken(t, db, "scale")
	client := pgClient(t)
	defer func() {
		if t.Failed() {
			t.Log(logsOf(servers...))
		}
	}()

	t.Run("contested create", func(t *testing.T) { scaleOutContestedCreate(t, servers, client, token) })
	t.Run("read elsewhere", func(t *testing.T) { scaleOutReadElsewhere(t, servers, client, token) })
	t.Run("revocation", func(t *testing.T) { scaleOutRevocation(t, servers, client, token, db) })
	t.Run("one killed", func(t *testing.T) { scaleOutOneKilled(t, servers, client, token) })
}

// scaleOutOneKilled kills one server under writes: no acknowledged plant is lost.
func scaleOutOneKilled(t *testing.T, servers []*server, client *http.Client, token string) {
	acked := writeAndKill(t, servers, client, token)
	survivors := servers[:2]
	checkSurvivorsHold(t, survivors, client, token, acked)
}

// writeAndKill runs 4 writers per server creating distinct plants, kills
// server 2 mid-flight, lets the survivors' writers run on after it, and
// returns the plants acknowledged, name by id.
func writeAndKill(t *testing.T, servers []*server, client *http.Client, token string) map[int64]string {
	victim := servers[2]
	var mu sync.Mutex
	acked := map[int64]string{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for si, s := range servers {
		for w := range 4 {
			wg.Go(func() {
				for i := int64(0); ctx.Err() == nil; i++ {
					id := int64(1)<<40 | int64(si)<<32 | int64(w)<<24 | i
					name := fmt.Sprintf("kill %d/%d/%d", si, w, i)
					a := do(client, "POST", s.url+"/plants", token, fmt.Sprintf(`{"id":%d,"name":%q}`, id, name))
					if a.status == 200 {
						mu.Lock()
						acked[id] = name
						mu.Unlock()
						continue
					}
					if s != victim || a.err == nil {
						t.Errorf("create %d through server %d: %v", id, si, a)
					}
					return // a failure, or the victim is gone
				}
			})
		}
	}
	started := time.Now()
	runUntil(700*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		byVictim := 0
		for id := range acked {
			if id>>32&0xff == 2 {
				byVictim++
			}
		}
		return len(acked) >= 60 && byVictim > 0
	})
	killed := time.Now()
	victim.kill(t)
	time.Sleep(700 * time.Millisecond) // the survivors go on alone
	cancel()
	wg.Wait()

	byVictim := 0
	for id := range acked {
		if id>>32&0xff == 2 {
			byVictim++
		}
	}
	t.Logf("%d creates acknowledged, %d of them by the server killed after %v", len(acked), byVictim, killed.Sub(started).Round(time.Millisecond))
	if len(acked) < 50 || byVictim == 0 {
		t.Fatalf("only %d creates acknowledged (%d by the victim); the test proves little", len(acked), byVictim)
	}
	return acked
}

// checkSurvivorsHold checks that the survivors list and read every
// acknowledged plant, and still take creates.
func checkSurvivorsHold(t *testing.T, survivors []*server, client *http.Client, token string, acked map[int64]string) {
	for i, s := range survivors {
		listed := listAll(t, client, s.url, token)
		for id, name := range acked {
			if got, ok := listed[id]; !ok {
				t.Errorf("acknowledged plant %d (%s) is not listed by survivor %d", id, name, i)
			} else if got != name {
				t.Errorf("acknowledged plant %d listed by survivor %d as %q, want %q", id, i, got, name)
			}
		}
	}
	// Spot checks through the single-plant read, and a create after.
	n := 0
	for id, name := range acked {
		for i, s := range survivors {
			want := fmt.Sprintf(`{"id":%d,"name":%q}`, id, name)
			if a := do(client, "GET", fmt.Sprintf("%s/plants/%d", s.url, id), token, ""); a.status != 200 || strings.TrimSpace(a.body) != want {
				t.Errorf("GET %d through survivor %d: %v, want %s", id, i, a, want)
			}
		}
		if n++; n == 50 {
			break
		}
	}
	for i, s := range survivors {
		if a := do(client, "POST", s.url+"/plants", token, fmt.Sprintf(`{"id":%d,"name":"after"}`, 200+i)); a.status != 200 {
			t.Errorf("create through survivor %d after the kill: %v", i, a)
		}
		if a := do(client, "GET", s.url+"/readyz", "", ""); a.status != 200 {
			t.Errorf("survivor %d /readyz: %v", i, a)
		}
	}
}

// scaleOutRevocation revokes a token beside the servers: each refuses it within 5 s.
func scaleOutRevocation(t *testing.T, servers []*server, client *http.Client, token, db string) {
	revokee := pgToken(t, db, "revokee")
	// Each server caches the token as valid first.
	for i, s := range servers {
		if a := do(client, "GET", s.url+"/plants/100", revokee, ""); a.status != 200 {
			t.Fatalf("server %d before revocation: %v", i, a)
		}
	}
	if r := cli(t, t.TempDir(), nil, "token", "revoke", "revokee", "--db", db); r.exit != 0 {
		t.Fatalf("token revoke: %+v", r)
	}
	revoked := time.Now()
	for i, s := range servers {
		for {
			a := do(client, "GET", s.url+"/plants/100", revokee, "")
			if a.status == 401 {
				t.Logf("server %d refuses the revoked token after %v", i, time.Since(revoked).Round(time.Millisecond))
				break
			}
			if a.status != 200 {
				t.Errorf("server %d after revocation: %v, want 200 (cached) or 401", i, a)
			}
			if time.Since(revoked) > 5*time.Second {
				t.Fatalf("server %d still accepts a token revoked 5 s ago: %v", i, a)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The others' token is untouched.
	for i, s := range servers {
		if a := do(client, "GET", s.url+"/plants/100", token, ""); a.status != 200 {
			t.Errorf("server %d, another token: %v", i, a)
		}
	}
}

// scaleOutReadElsewhere reads through the others what one server created.
func scaleOutReadElsewhere(t *testing.T, servers []*server, client *http.Client, token string) {
	if a := do(client, "POST", servers[0].url+"/plants", token, `{"id":100,"name":"Monstera","tag":"tropical"}`); a.status != 200 {
		t.Fatalf("create through server 0: %v", a)
	}
	for i, s := range servers[1:] {
		a := do(client, "GET", s.url+"/plants/100", token, "")
		if a.status != 200 || strings.TrimSpace(a.body) != `{"id":100,"name":"Monstera","tag":"tropical"}` {
			t.Errorf("GET through server %d: %v", i+1, a)
		}
	}
	a := do(client, "GET", servers[2].url+"/plants?tag=tropical", token, "")
	if a.status != 200 || strings.TrimSpace(a.body) != `[{"id":100,"name":"Monstera","tag":"tropical"}]` {
		t.Errorf("list through server 2: %v", a)
	}
}

// scaleOutContestedCreate races creates of one id through every server.
func scaleOutContestedCreate(t *testing.T, servers []*server, client *http.Client, token string) {
	// 30 creates of one id, 10 through each server, in 3 contents,
	// each content sent through all three servers: exactly one content
	// is stored, every request carrying it gets 200, the others 409.
	for id := int64(1); id <= 5; id++ {
		const racers = 30
		answers := make([]answer, racers)
		var ready, done sync.WaitGroup
		ready.Add(racers)
		start := make(chan struct{})
		for g := range racers {
			done.Go(func() {
				s := servers[g%3]
				body := fmt.Sprintf(`{"id":%d,"name":"contender %d","tag":"race"}`, id, g/10)
				ready.Done()
				<-start
				answers[g] = do(client, "POST", s.url+"/plants", token, body)
			})
		}
		ready.Wait()
		close(start)
		done.Wait()

		winners := map[int]bool{}
		for g, a := range answers {
			if a.err != nil || (a.status != 200 && a.status != 409) {
				t.Errorf("id %d: racer %d (content %d, server %d): %v, want 200 or 409", id, g, g/10, g%3, a)
			}
			if a.status == 200 {
				winners[g/10] = true
			}
		}
		if len(winners) != 1 {
			t.Fatalf("id %d: contents answered 200: %v, want exactly one", id, slices.Sorted(maps.Keys(winners)))
		}
		winner := slices.Collect(maps.Keys(winners))[0]
		for g, a := range answers {
			if (g/10 == winner) != (a.status == 200) {
				t.Errorf("id %d: racer %d with content %d got %v; content %d won", id, g, g/10, a, winner)
			}
		}
		want := fmt.Sprintf(`{"id":%d,"name":"contender %d","tag":"race"}`, id, winner)
		for i, s := range servers {
			if a := do(client, "GET", fmt.Sprintf("%s/plants/%d", s.url, id), token, ""); a.status != 200 || strings.TrimSpace(a.body) != want {
				t.Errorf("id %d: GET through server %d: %v, want 200 %s", id, i, a, want)
			}
		}
	}
}

// listAll follows GET /plants page by page and returns every plant's name
// by id.
func listAll(t *testing.T, client *http.Client, base, token string) map[int64]string {
	t.Helper()
	all := map[int64]string{}
	after := int64(-1 << 63)
	for {
		a := do(client, "GET", fmt.Sprintf("%s/plants?limit=1000&after=%d", base, after), token, "")
		if a.status != 200 {
			t.Fatalf("list %s after %d: %v", base, after, a)
		}
		var page []struct {
			ID   int64
			Name string
		}
		if err := json.Unmarshal([]byte(a.body), &page); err != nil {
			t.Fatalf("list %s: %v", base, err)
		}
		for _, p := range page {
			all[p.ID] = p.Name
		}
		if len(page) < 1000 {
			return all
		}
		after = page[len(page)-1].ID
	}
}

// TestPostgresMigrationsAtOnce starts four servers together on an empty
// database: they all come up, and each migration is applied once. A
// database migrated by a newer plantstore is refused.
func TestPostgresMigrationsAtOnce(t *testing.T) {
	db := pgtest.NewDatabase(t)
	servers := startServes(t, 4, db)
	client := pgClient(t)
	for i, s := range servers {
		if a := do(client, "GET", s.url+"/readyz", "", ""); a.status != 200 {
			t.Errorf("serve %d /readyz: %v\n%s", i, a, logsOf(servers...))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT version, count(*) FROM schema_migrations GROUP BY version ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Version int32
		Count   int64
	}])
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) == 0 {
		t.Fatal("schema_migrations is empty")
	}
	for i, c := range counts {
		if c.Version != int32(i+1) || c.Count != 1 {
			t.Errorf("schema_migrations: %+v, want each version from 1 exactly once", counts)
			break
		}
	}

	for _, s := range servers {
		if code := s.stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("exit %d after SIGTERM\n%s", code, s.logs)
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', now())`); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, binary, "serve", "--addr", "127.0.0.1:0", "--db", db)
	var stderr apitest.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("serve on a newer schema did not exit: %s", stderr.String())
	}
	if err == nil || !strings.Contains(stderr.String(), "newer") {
		t.Errorf("serve on a schema of version 9999: %v, stderr %q; want a non-zero exit saying the schema is newer", err, stderr.String())
	}
}

// TestPostgresOutage stops the database under a running server: every
// request that needs it answers 503 promptly, with the Error body, and
// once the database is back the same server answers as before.
func TestPostgresOutage(t *testing.T) {
	pg := pgtest.StartServer(t)
	db := pg.URL()
	const requestTimeout = 2 * time.Second
	s := startServes(t, 1, db, "--request-timeout", requestTimeout.String())[0]
	token := pgToken(t, db, "outage")
	client := pgClient(t)
	defer func() {
		if t.Failed() {
			t.Logf("%s--- PostgreSQL's log:\n%s", logsOf(s), pg.Log())
		}
	}()
	if a := do(client, "POST", s.url+"/plants", token, `{"id":1,"name":"Survivor","tag":"hardy"}`); a.status != 200 {
		t.Fatalf("create: %v", a)
	}

	pg.Stop()
	down := time.Now()
	requests := []struct{ method, path, body string }{
		{"POST", "/plants", `{"id":2,"name":"During"}`},
		{"GET", "/plants/1", ""},
		{"GET", "/plants", ""},
		{"GET", "/plants?tag=hardy", ""}, // a page of a tag: its own statement in a batch
		{"PUT", "/plants/1", `{"name":"Renamed"}`},
		{"DELETE", "/plants/1", ""},
		{"GET", "/readyz", ""},
	}
	// Twice: first while the server may still hold the token in its
	// cache, then after the cache has expired, when the token itself
	// cannot be checked.
	for round, wait := range []time.Duration{0, 2500 * time.Millisecond} {
		time.Sleep(wait)
		for _, r := range requests {
			a := do(client, r.method, s.url+r.path, token, r.body)
			if a.err != nil || a.status != 503 {
				t.Errorf("round %d, %s %s with the database down: %v, want 503", round, r.method, r.path, a)
				continue
			}
			if a.took > requestTimeout+time.Second {
				t.Errorf("round %d, %s %s took %v, more than --request-timeout %v + 1 s", round, r.method, r.path, a.took, requestTimeout)
			}
			if mt, _, _ := mime.ParseMediaType(a.contentType); mt != "application/json" {
				t.Errorf("round %d, %s %s: Content-Type %q", round, r.method, r.path, a.contentType)
			}
			if !isErrorBody(a.body, 503) {
				t.Errorf("round %d, %s %s: body %q is not an Error of 503", round, r.method, r.path, a.body)
			}
		}
	}
	t.Logf("answered 503 throughout %v of outage", time.Since(down).Round(time.Millisecond))

	pg.Start()
	checkServingAgain(t, s, client, token)
	if code := s.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
}

// isErrorBody says whether body is an Error with the status and a message.
func isErrorBody(body string, status int) bool {
	var e struct {
		Error   int     `json:"error"`
		Message *string `json:"message"`
	}
	err := json.Unmarshal([]byte(body), &e)
	return err == nil && e.Error == status && e.Message != nil && *e.Message != ""
}

// checkServingAgain waits for s to take creates once its database is back
// (10 s at most), then checks what it kept from before the outage.
func checkServingAgain(t *testing.T, s *server, client *http.Client, token string) {
	back := time.Now()
	for {
		a := do(client, "POST", s.url+"/plants", token, `{"id":3,"name":"After"}`)
		if a.status == 200 {
			break
		}
		if a.status != 503 {
			t.Errorf("create as the database comes back: %v, want 503 or 200", a)
		}
		if time.Since(back) > 10*time.Second {
			t.Fatalf("creates still fail 10 s after the database came back: %v", a)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("serving again %v after the database came back", time.Since(back).Round(time.Millisecond))
	if a := do(client, "GET", s.url+"/plants/1", token, ""); a.status != 200 || strings.TrimSpace(a.body) != `{"id":1,"name":"Survivor","tag":"hardy"}` {
		t.Errorf("the plant created before the outage: %v", a)
	}
	if a := do(client, "GET", s.url+"/plants/2", token, ""); a.status != 404 {
		t.Errorf("the create refused during the outage: %v, want 404", a)
	}
	if a := do(client, "GET", s.url+"/plants", token, ""); a.status != 200 || !strings.Contains(a.body, `"Survivor"`) || !strings.Contains(a.body, `"After"`) {
		t.Errorf("list after the outage: %v", a)
	}
	if a := do(client, "GET", s.url+"/readyz", "", ""); a.status != 200 {
		t.Errorf("/readyz after the outage: %v", a)
	}
}
