package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/sqlite"
)

var crashSeed = flag.Uint64("crash-seed", 0, "seed of TestCrashKeepsEveryAcknowledgedWrite's random choices (0: a new one, which the test logs)")

// checkStore opens the file as the service would (replaying the WAL),
// checks SQLite's integrity and that every acknowledged plant is stored
// with the name it was acknowledged with.
func checkStore(t *testing.T, path string, acked map[int64]string) {
	t.Helper()
	checkIntegrity(t, path)
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for id, name := range acked {
		p, err := db.GetPlant(context.Background(), id)
		if err != nil {
			t.Errorf("acknowledged plant %d: %v", id, err)
		} else if p.Name != name {
			t.Errorf("acknowledged plant %d is named %q, want %q", id, p.Name, name)
		}
	}
}

// checkIntegrity runs PRAGMA integrity_check on the SQLite file at path,
// which no server may be using.
func checkIntegrity(t *testing.T, path string) {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var integrity string
	if err := raw.QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
		t.Errorf("integrity_check = %q, %v", integrity, err)
	}
}

// The process is killed with SIGKILL at random moments while workers
// create, update and delete plants, and restarted each time. Every write
// it acknowledged holds afterwards: an acknowledged create or update is
// stored with that content, an acknowledged delete stays deleted. Only a
// write that was unanswered when the process died may have gone either
// way. The file passes SQLite's integrity check.
func TestCrashKeepsEveryAcknowledgedWrite(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d; replay its choices with -crash-seed=%d", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "crash")
	// A timeout, so a stalled request cannot hang the test; a request that
	// times out counts as unanswered, like one cut by the kill.
	client := &http.Client{Timeout: 5 * time.Second}
	workers := make([]*crashWorker, 8)
	for i := range workers {
		workers[i] = &crashWorker{
			n:     int64(i + 1),
			rng:   rand.New(rand.NewPCG(seed, uint64(i+1))),
			maybe: map[int64][]plantState{},
			acked: map[string]int{},
		}
	}
	for round := range 4 {
		s := serveProcess(t, dir)
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Go(func() { w.run(t, client, s.url, token) })
		}
		killAfter := time.Duration(300+rng.IntN(1200)) * time.Millisecond
		time.Sleep(killAfter)
		s.kill(t)
		wg.Wait()
		client.CloseIdleConnections()
		unanswered := 0
		for _, w := range workers {
			unanswered += w.unanswered
			w.unanswered = 0
		}
		t.Logf("round %d: SIGKILL after %v with %d writes in flight", round, killAfter, unanswered)
	}

	expect := map[int64][]plantState{}
	acked := map[string]int{}
	for _, w := range workers {
		for id, states := range w.maybe {
			expect[id] = states
		}
		for method, n := range w.acked {
			acked[method] += n
		}
	}
	t.Logf("acknowledged: %d creates, %d updates, %d deletes, %d answers of 404, over %d ids",
		acked["POST"], acked["PUT"], acked["DELETE"], acked["404"], len(expect))
	if acked["POST"] < 50 || acked["PUT"] < 20 || acked["DELETE"] < 20 {
		t.Fatalf("too few writes were acknowledged for the test to prove much: %v", acked)
	}

	checkFileAfterCrashes(t, filepath.Join(dir, "plantstore.db"), expect)
	checkServiceAfterCrashes(t, dir, token, expect, rng)
}

// checkFileAfterCrashes opens the file as the next start finds it: it
// passes SQLite's integrity check and holds what the acknowledged writes
// left, and the feed replays.
func checkFileAfterCrashes(t *testing.T, path string, expect map[int64][]plantState) {
	checkIntegrity(t, path)
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for id, states := range expect {
		p, err := db.GetPlant(context.Background(), id)
		got := absent
		if err == nil {
			got = stateOf(p)
		} else if plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
			t.Errorf("plant %d: %v", id, err)
			continue
		}
		if !slices.Contains(states, got) {
			t.Errorf("plant %d is %v in the file; its acknowledged writes leave it %s", id, got, describe(states))
		}
	}
	checkFeedReplays(t, db)
	db.Close()
}

// checkServiceAfterCrashes restarts the service: it lists and answers
// what the file holds.
func checkServiceAfterCrashes(t *testing.T, dir, token string, expect map[int64][]plantState, rng *rand.Rand) {
	s := serve(t, dir)
	checkListing(t, s.url, token, expect)
	api := apitest.Client(t)
	ids := make([]int64, 0, len(expect))
	for id := range expect {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids[:min(len(ids), 100)] {
		status, _, body := call(t, api, "GET", fmt.Sprintf("%s/plants/%d", s.url, id), token, "")
		got := absent
		switch status {
		case 200:
			got = decodeState(t, body)
		case 404:
		default:
			t.Errorf("GET /plants/%d: %d %s", id, status, body)
			continue
		}
		if !slices.Contains(expect[id], got) {
			t.Errorf("GET /plants/%d answers %v; its acknowledged writes leave it %s", id, got, describe(expect[id]))
		}
	}
	if code := s.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
}

// checkListing walks GET /plants to its end: every plant listed is one
// that may be stored, and every plant that must be stored is listed.
func checkListing(t *testing.T, url, token string, expect map[int64][]plantState) {
	t.Helper()
	api := apitest.Client(t)
	listed := map[int64]bool{}
	query := "?limit=1000"
	for {
		status, _, body := call(t, api, "GET", url+"/plants"+query, token, "")
		if status != 200 {
			t.Fatalf("GET /plants%s: %d %s", query, status, body)
		}
		var page []struct {
			ID   int64   `json:"id"`
			Name string  `json:"name"`
			Tag  *string `json:"tag"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatalf("GET /plants%s: %v", query, err)
		}
		for _, p := range page {
			listed[p.ID] = true
			got := stateOf(plantstore.Plant{ID: p.ID, Name: p.Name, Tag: p.Tag})
			if states, ok := expect[p.ID]; !ok {
				t.Errorf("GET /plants lists plant %d, which no one wrote", p.ID)
			} else if !slices.Contains(states, got) {
				t.Errorf("GET /plants lists plant %d as %v; its acknowledged writes leave it %s", p.ID, got, describe(states))
			}
		}
		if len(page) < 1000 {
			break
		}
		query = fmt.Sprintf("?limit=1000&after=%d", page[len(page)-1].ID)
	}
	for id, states := range expect {
		if !listed[id] && !slices.Contains(states, absent) {
			t.Errorf("GET /plants does not list plant %d; its acknowledged writes leave it %s", id, describe(states))
		}
	}
}

// plantState is a content an id may have in the store: absent, or a plant
// with a name and maybe a tag. It is comparable, so == compares contents.
type plantState struct {
	present bool
	name    string
	tagged  bool
	tag     string
}

var absent = plantState{}

func stateOf(p plantstore.Plant) plantState {
	s := plantState{present: true, name: p.Name}
	if p.Tag != nil {
		s.tagged, s.tag = true, *p.Tag
	}
	return s
}

func (s plantState) String() string {
	switch {
	case !s.present:
		return "absent"
	case s.tagged:
		return fmt.Sprintf("%q tag %q", s.name, s.tag)
	default:
		return fmt.Sprintf("%q without a tag", s.name)
	}
}

// json is the body that writes s, with id when it is not zero.
func (s plantState) json(id int64) string {
	body := struct {
		ID   int64   `json:"id,omitempty"`
		Name string  `json:"name"`
		Tag  *string `json:"tag,omitempty"`
	}{ID: id, Name: s.name}
	if s.tagged {
		body.Tag = &s.tag
	}
	b, _ := json.Marshal(body)
	return string(b)
}

func describe(states []plantState) string {
	if len(states) == 1 {
		return states[0].String()
	}
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = s.String()
	}
	return "one of " + strings.Join(parts, " or ") + " (a write was unanswered)"
}

func decodeState(t *testing.T, body []byte) plantState {
	t.Helper()
	var p struct {
		Name string  `json:"name"`
		Tag  *string `json:"tag"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Errorf("%v: %s", err, body)
	}
	return stateOf(plantstore.Plant{Name: p.Name, Tag: p.Tag})
}

// crashWorker writes plants under ids of its own only, one request at a
// time, so it alone decides what each should hold. For every id it keeps
// the states the store may be in: the one its last acknowledged write left,
// and, when a later write went unanswered, that write's outcome too.
type crashWorker struct {
	n          int64 // its ids are n<<32 | i
	rng        *rand.Rand
	next       int64   // i of its next new id
	ids        []int64 // every id it has written
	maybe      map[int64][]plantState
	ops        int            // requests sent, for unique names
	acked      map[string]int // acknowledged writes by method, and "404"
	unanswered int            // writes unanswered since last counted
}

// run writes until the server stops answering: the first write left
// unanswered ends it, so a worker never has two writes pending.
func (w *crashWorker) run(t *testing.T, client *http.Client, url, token string) {
	for w.write(t, client, url, token) {
	}
}

// write sends one create, update or delete and checks the answer against
// what the id may hold. It reports whether the worker should go on.
func (w *crashWorker) write(t *testing.T, client *http.Client, url, token string) bool {
	var id int64
	fresh := w.rng.IntN(10) < 4 || len(w.ids) == 0
	if fresh {
		id = w.n<<32 | w.next
		w.next++
		w.ids = append(w.ids, id)
		w.maybe[id] = []plantState{absent}
	} else {
		id = w.ids[w.rng.IntN(len(w.ids))]
	}
	before := w.maybe[id]
	w.ops++
	content := plantState{present: true, name: fmt.Sprintf("plant %d, write %d", id, w.ops)}
	switch w.rng.IntN(3) {
	case 0:
		content.tagged, content.tag = true, fmt.Sprintf("t%d", w.rng.IntN(5))
	case 1:
		content.tagged = true // an empty tag, which is not no tag
	}

	var method, target, body string
	var after plantState
	switch {
	case fresh || slices.Equal(before, []plantState{absent}) && w.rng.IntN(2) == 0:
		method, target, body, after = "POST", url+"/plants", content.json(id), content
	case w.rng.IntN(2) == 0:
		method, target, body, after = "PUT", fmt.Sprintf("%s/plants/%d", url, id), content.json(0), content
	default:
		method, target, after = "DELETE", fmt.Sprintf("%s/plants/%d", url, id), absent
	}
	status, _, answer, err := send(client, method, target, token, body)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false // the server was gone before the write was sent
	}
	if err != nil || status == http.StatusServiceUnavailable {
		// The write may have been done, or not, or may yet be (a 503'd
		// create can still commit): until another write is answered the
		// id may be in either state.
		if !slices.Contains(before, after) {
			w.maybe[id] = append(slices.Clone(before), after)
		}
		w.unanswered++
		return false
	}
	mayBeAbsent := slices.Contains(before, absent)
	mayBePresent := slices.ContainsFunc(before, func(s plantState) bool { return s.present })
	switch {
	case method == "POST" && status == 200 && mayBeAbsent,
		method == "PUT" && status == 200 && mayBePresent:
		if got := decodeState(t, answer); got != after {
			t.Errorf("%s plant %d answered %v, want %v", method, id, got, after)
		}
		w.maybe[id] = []plantState{after}
		w.acked[method]++
	case method == "DELETE" && status == 204 && mayBePresent:
		w.maybe[id] = []plantState{absent}
		w.acked[method]++
	case method != "POST" && status == 404 && mayBeAbsent:
		w.maybe[id] = []plantState{absent}
		w.acked["404"]++
	default:
		t.Errorf("%s plant %d: %d %s; its acknowledged writes left it %s", method, id, status, answer, describe(before))
		return false
	}
	return true
}

// send makes one request; an error means no answer came.
func send(client *http.Client, method, url, token, body string) (int, http.Header, []byte, error) {
	var reader io.Reader
	if body != "" {
		reader = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, reader)
	if err != nil {
		return 0, nil, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, bytes.TrimSpace(answer), nil
}

// call makes one request that must be answered.
func call(t *testing.T, client *http.Client, method, url, token, body string) (int, http.Header, []byte) {
	t.Helper()
	status, header, answer, err := send(client, method, url, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return status, header, answer
}

// hangingRequest starts a create on s that will not finish by itself, its
// body never coming whole, and gives the server time to take it in.
func hangingRequest(t *testing.T, s *server, token string) {
	t.Helper()
	sendPart(t, s, fmt.Sprintf("POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":", token))
}

// sendPart sends the start of a request to s on a connection of its own,
// and gives the server time to take it in.
func sendPart(t *testing.T, s *server, part string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	io.WriteString(conn, part)
	time.Sleep(300 * time.Millisecond)
}

// A request still running when --shutdown-timeout ends: the process says
// so, in the log's JSON too, and exits 1; so too for one net/http serves
// (a chunked body, which the lean server hands it).
func TestShutdownTimeoutExitsOne(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "me")
	for _, handedOff := range []bool{false, true} {
		s := serveProcess(t, dir, "--shutdown-timeout", "300ms", "--read-timeout", "60s", "--body-read-timeout", "60s")
		if handedOff {
			sendPart(t, s, "POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+token+"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{\"id\":\r\n")
		} else {
			hangingRequest(t, s, token)
		}
		if code := stopOutOfTime(t, s); code != 1 {
			t.Errorf("handed off %v: exit status %d after the shutdown timeout, want 1", handedOff, code)
		}
		logs := s.logs.String()
		if !strings.Contains(logs, `"level":"ERROR","msg":"stopped","err":"in-flight requests did not finish within 300ms"`) ||
			!strings.Contains(logs, "plantstore: in-flight requests did not finish within 300ms") {
			t.Errorf("handed off %v: the shutdown timeout is not said, as a log line and on stderr:\n%s", handedOff, logs)
		}
	}
}

// A create waiting for the store's lock, which another process holds past
// --shutdown-timeout (and past the 5 s the token-use times get): its
// connection closes without an answer when the timeout ends, whichever
// server reads it (the lean one, or net/http for a chunked body), even
// when the lock is freed just after and the create then goes through; and
// the process exits soon after, not when --busy-timeout ends (docs/
// operations.md, "Running it").
func TestShutdownTimeoutWithTheStoreLocked(t *testing.T) {
	for _, tc := range []struct {
		name     string
		chunked  bool
		freeLock bool // once the process has said it stopped
	}{
		{"held to the end", false, false},
		{"freed after the timeout", false, true},
		{"freed after the timeout, handed off", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			token := mustToken(t, dir, "--name", "me")
			s := serveProcess(t, dir, "--shutdown-timeout", "300ms", "--busy-timeout", "60s", "--request-timeout", "60s")
			// Its own busy timeout: the server may hold the lock a moment.
			lock, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "plantstore.db")+"?_pragma=busy_timeout(10000)")
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Close()
			holder, err := lock.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			if _, err := holder.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
				t.Fatal(err)
			}
			defer holder.ExecContext(context.Background(), "ROLLBACK")
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			body := `{"id":1,"name":"late"}`
			head := fmt.Sprintf("POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n", token)
			if tc.chunked {
				fmt.Fprintf(conn, "%sTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", head, len(body), body)
			} else {
				fmt.Fprintf(conn, "%sContent-Length: %d\r\n\r\n%s", head, len(body), body)
			}
			time.Sleep(300 * time.Millisecond) // the create waits for the lock
			answered := make(chan string, 1)
			go func() {
				conn.SetReadDeadline(time.Now().Add(time.Minute))
				got, _ := io.ReadAll(conn)
				answered <- string(got)
			}()
			exited := make(chan int, 1)
			go func() { exited <- stopOutOfTime(t, s) }()
			if tc.freeLock {
				for deadline := time.Now().Add(15 * time.Second); !strings.Contains(s.logs.String(), `"msg":"stopped"`); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("no stopped line within 15 s:\n%s", s.logs)
					}
				}
				holder.ExecContext(context.Background(), "ROLLBACK")
			}
			select {
			case code := <-exited:
				if code != 1 {
					t.Errorf("exit status %d after the shutdown timeout, want 1\n%s", code, s.logs)
				}
			case <-time.After(40 * time.Second):
				t.Fatalf("the process did not exit within 40 s of SIGTERM:\n%s", s.logs)
			}
			select {
			case got := <-answered:
				if got != "" {
					t.Errorf("the create cut off by the shutdown was answered %q, want its connection closed", got)
				}
			case <-time.After(time.Second):
				t.Error("the connection of the create cut off by the shutdown is still open after the exit")
			}
		})
	}
}

// Connections whose request head is still coming in when
// --shutdown-timeout ends hold no request: the process closes them and
// exits 0, whether the lean server reads the head or net/http does (a
// head longer than the lean server's buffer, which it hands over).
func TestShutdownTimeoutWithHeadsComingInExitsZero(t *testing.T) {
	dir := t.TempDir()
	for _, head := range []string{
		"GET /plants/1 HTTP/1.1\r\nHost: x\r\n",
		"GET /plants/1 HTTP/1.1\r\nHost: x\r\nX-Long: " + strings.Repeat("a", 6000) + "\r\n",
	} {
		s := serveProcess(t, dir, "--shutdown-timeout", "300ms", "--read-header-timeout", "60s")
		sendPart(t, s, head)
		if code := stopOutOfTime(t, s); code != 0 {
			t.Errorf("a head of %d bytes coming in: exit status %d after the shutdown timeout, want 0\n%s", len(head), code, s.logs)
		}
	}
}

// stopOutOfTime sends s SIGTERM and returns its exit status, which must
// come within 10 s.
func stopOutOfTime(t *testing.T, s *server) int {
	t.Helper()
	start := time.Now()
	code := s.stop(t, syscall.SIGTERM)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("exited %v after SIGTERM; want within 10 s:\n%s", took, s.logs)
	}
	return code
}

// SIGTERM drains the requests in flight for up to --shutdown-timeout; a
// SIGINT during the drain stops the process at once, as an operator
// pressing Ctrl-C again expects. (A repeated SIGTERM does not:
// TestGracefulShutdown.)
//
// Started with SIGINT ignored, as a script's background job (cmd &) or
// nohup starts it, the second SIGINT stops it all the same, with the exit
// status 130 a shell gives a process SIGINT ended.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	t.Run("SIGINT caught", func(t *testing.T) { testSecondSignal(t, false) })
	t.Run("SIGINT ignored at start", func(t *testing.T) { testSecondSignal(t, true) })
}

func testSecondSignal(t *testing.T, ignoredAtStart bool) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "me")
	args := []string{"--shutdown-timeout", "60s", "--read-timeout", "60s", "--body-read-timeout", "60s"}
	var s *server
	if ignoredAtStart {
		// bash's trap '' sets SIGINT's disposition to ignored, and exec
		// keeps it.
		cmd := exec.Command("bash", append([]string{"-c", `trap '' INT; exec "$0" serve --addr 127.0.0.1:0 "$@"`, binary}, args...)...)
		cmd.Dir = dir
		var addr chan string
		s, addr = startProcess(t, cmd)
		s.await(t, addr, 20*time.Second)
	} else {
		s = serveProcess(t, dir, args...)
	}
	hangingRequest(t, s, token)
	s.cmd.Process.Signal(syscall.SIGTERM)
	if !s.logged(`"shutting down"`, 10*time.Second) {
		t.Fatalf("no shutdown after SIGTERM:\n%s", s.logs)
	}
	begin := time.Now()
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		exit, ok := errors.AsType[*exec.ExitError](err)
		switch {
		case ignoredAtStart && (!ok || exit.ExitCode() != 130):
			t.Errorf("after the second signal: %v, want exit status 130", err)
		case !ignoredAtStart && (!ok || exit.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT):
			t.Errorf("after the second signal: %v, want the process ended by SIGINT", err)
		}
		t.Logf("stopped %v after the second signal", time.Since(begin).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("still draining 10 s after a second signal:\n%s", s.logs)
	}
}
