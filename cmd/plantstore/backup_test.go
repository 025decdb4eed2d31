package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/apitest"
)

// Eight writers create plants through the server while two backups are
// taken beside it. Each backup, restored into a new directory and served,
// holds every plant acknowledged before it began, with its name, and only
// plants sent before it returned. The store starts with enough plants
// that creates commit while a backup copies.
func TestBackupUnderLoadKeepsEveryAcknowledgedPlant(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "load")
	seeded := seedPlants(t, filepath.Join(dir, "plantstore.db"), 50_000)
	s := serve(t, dir)
	client := &http.Client{Timeout: 10 * time.Second}

	l := &createLoad{sent: maps.Clone(seeded), acked: maps.Clone(seeded)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writers := l.start(ctx, t, client, s.url, token)
	time.Sleep(300 * time.Millisecond)
	backups, ackedDuring := l.takeBackups(t, dir)
	cancel()
	writers.Wait()
	if len(backups[0].ackedBefore) < 100 {
		t.Fatalf("only %d creates were acknowledged before the first backup; the test proves little", len(backups[0].ackedBefore))
	}
	if ackedDuring == 0 {
		t.Error("no create was acknowledged while a backup ran; the backups were not taken under load")
	}
	if code := s.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("serve exited %d", code)
	}
	for i, b := range backups {
		checkRestoredBackup(t, i, b, client, token, len(l.sent))
	}
}

// createLoad is eight writers creating plants: every plant sent,
// whatever its answer, and every plant acknowledged, name by id.
type createLoad struct {
	mu          sync.Mutex
	sent, acked map[int64]string
}

func (l *createLoad) start(ctx context.Context, t *testing.T, client *http.Client, url, token string) *sync.WaitGroup {
	var writers sync.WaitGroup
	for w := range int64(8) {
		writers.Go(func() {
			for i := int64(0); ctx.Err() == nil; i++ {
				id := w<<32 | i
				name := fmt.Sprintf("plant %d/%d", w, i)
				l.mu.Lock()
				l.sent[id] = name
				l.mu.Unlock()
				status, _, body, err := send(client, "POST", url+"/plants", token, fmt.Sprintf(`{"id":%d,"name":%q}`, id, name))
				if err != nil || status != 200 {
					t.Errorf("create %d: %d %s %v", id, status, body, err)
					return
				}
				l.mu.Lock()
				l.acked[id] = name
				l.mu.Unlock()
			}
		})
	}
	return &writers
}

func (l *createLoad) acknowledged() map[int64]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.acked)
}

type loadBackup struct {
	file        string
	ackedBefore map[int64]string // acknowledged before the backup began
	sentBefore  map[int64]string // sent before it returned
}

// takeBackups takes two backups beside the load, and says how many
// creates were acknowledged while they ran.
func (l *createLoad) takeBackups(t *testing.T, dir string) (backups []loadBackup, ackedDuring int) {
	for i := range 2 {
		before := l.acknowledged()
		file := filepath.Join(t.TempDir(), fmt.Sprintf("backup-%d.db", i))
		start := time.Now()
		r := cli(t, dir, nil, "backup", "--to", file)
		took := time.Since(start)
		if r.exit != 0 || r.stdout != "" || !strings.Contains(r.stderr, "backed up") {
			t.Fatalf("backup %d: %+v", i, r)
		}
		l.mu.Lock()
		sentBefore := maps.Clone(l.sent)
		l.mu.Unlock()
		during := len(l.acknowledged()) - len(before)
		ackedDuring += during
		t.Logf("backup %d took %v, %d creates acknowledged meanwhile: %s", i, took.Round(time.Millisecond), during, strings.TrimSpace(r.stderr))
		backups = append(backups, loadBackup{file, before, sentBefore})
		time.Sleep(200 * time.Millisecond)
	}
	return backups, ackedDuring
}

// checkRestoredBackup restores backup i into a new directory, serves it,
// and checks that it holds every plant acknowledged before it began and
// only plants sent before it returned.
func checkRestoredBackup(t *testing.T, i int, b loadBackup, client *http.Client, token string, sentInAll int) {
	restoredDir := t.TempDir()
	r := cli(t, restoredDir, nil, "restore", "--from", b.file, "--db", filepath.Join(restoredDir, "plantstore.db"))
	if r.exit != 0 || !strings.Contains(r.stderr, "restored") {
		t.Fatalf("restore of backup %d: %+v", i, r)
	}
	rs := serve(t, restoredDir)
	stored := listAll(t, client, rs.url, token) // the backup holds the token too
	lost, unsent := 0, 0
	for id, name := range b.ackedBefore {
		if stored[id] != name {
			if lost++; lost <= 10 {
				t.Errorf("backup %d: plant %d, acknowledged before it began, is %q, want %q", i, id, stored[id], name)
			}
		}
	}
	for id, name := range stored {
		if b.sentBefore[id] != name {
			if unsent++; unsent <= 10 {
				t.Errorf("backup %d holds plant %d %q, which was not sent before the backup returned", i, id, name)
			}
		}
	}
	if lost+unsent > 0 {
		t.Errorf("backup %d: %d acknowledged plants lost, %d plants never sent", i, lost, unsent)
	}
	checked := 0
	for id, name := range b.ackedBefore {
		status, _, body := call(t, client, "GET", fmt.Sprintf("%s/plants/%d", rs.url, id), token, "")
		if want := fmt.Sprintf(`{"id":%d,"name":%q}`, id, name); status != 200 || string(body) != want {
			t.Errorf("backup %d: GET plant %d: %d %s, want %s", i, id, status, body, want)
		}
		if checked++; checked == 50 {
			break
		}
	}
	t.Logf("backup %d: %d plants acknowledged before it began, %d in it, %d sent in all", i, len(b.ackedBefore), len(stored), sentInAll)
	rs.stop(t, syscall.SIGTERM)
}

// What backup and restore refuse, and how they say it.
func TestBackupAndRestoreRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "me")
	s := serve(t, dir)
	client := apitest.Served(t, &http.Client{Timeout: 10 * time.Second}, s.url)
	if status, _, body := call(t, client, "POST", s.url+"/plants", token, `{"id":1,"name":"before"}`); status != 200 {
		t.Fatalf("create: %d %s", status, body)
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	if r := cli(t, dir, nil, "backup", "--to", file); r.exit != 0 || !strings.Contains(r.stderr, "its SHA-256 is in "+file+".sha256") {
		t.Fatalf("backup: %+v", r)
	}
	if status, _, body := call(t, client, "POST", s.url+"/plants", token, `{"id":2,"name":"after"}`); status != 200 {
		t.Fatalf("create: %d %s", status, body)
	}
	if r := cli(t, dir, nil, "backup", "--to", file); r.exit != 1 || !strings.Contains(r.stderr, "exists") {
		t.Errorf("backup onto an existing file: %+v", r)
	}
	// Each mistake is named as the other commands name it, and no
	// temporary file's name shows.
	elsewhere := filepath.Join(dir, "elsewhere.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"backup", "--to", filepath.Join(t.TempDir(), "b.db"), "--db", elsewhere}, "there is no store at " + elsewhere},
		{[]string{"backup", "--to", filepath.Join(dir, "nodir", "b.db")}, "the directory " + filepath.Join(dir, "nodir") + " does not exist"},
		{[]string{"backup", "--to", t.TempDir()}, "is a directory"},
		{[]string{"restore", "--from", file, "--db", filepath.Join(dir, "nodir", "x.db")}, "the directory " + filepath.Join(dir, "nodir") + " does not exist"},
		{[]string{"restore", "--from", t.TempDir(), "--db", filepath.Join(dir, "x.db")}, "is a directory; name a backup file"},
		{[]string{"backup", "--to", filepath.Join(file, "b.db")}, file + " is a file, not a directory"},
		{[]string{"restore", "--from", file, "--db", filepath.Join(file, "x.db")}, file + " is a file, not a directory"},
	} {
		if r := cli(t, dir, nil, tc.args...); r.exit != 1 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, ".tmp-") {
			t.Errorf("%q: %+v, want exit 1 and %q", tc.args, r, tc.want)
		}
	}
	if _, err := os.Stat(elsewhere); err == nil {
		t.Error("a backup of a missing store made one")
	}
	// While the server runs, with --force or not.
	for _, args := range [][]string{{"restore", "--from", file}, {"restore", "--from", file, "--force"}} {
		if r := cli(t, dir, nil, args...); r.exit != 1 || !strings.Contains(r.stderr, "another plantstore serve") || !strings.Contains(r.stderr, "stop the server first") {
			t.Errorf("%q beside a server: %+v", args, r)
		}
	}
	s.stop(t, syscall.SIGTERM)

	// A store is replaced only with --force, never from a variable.
	if r := cli(t, dir, []string{"PLANTSTORE_FORCE=true"}, "restore", "--from", file); r.exit != 1 || !strings.Contains(r.stderr, "--force") {
		t.Errorf("restore onto a store without --force: %+v", r)
	}
	// A mistyped backup name is named first, not the advice to --force.
	if r := cli(t, dir, nil, "restore", "--from", file+"x"); r.exit != 1 || !strings.Contains(r.stderr, "no such file") || strings.Contains(r.stderr, "--force") {
		t.Errorf("restore of a missing backup onto a store: %+v", r)
	}
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database ", 500)), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := cli(t, dir, nil, "restore", "--from", garbage, "--force"); r.exit != 1 || !strings.Contains(r.stderr, "not a usable backup") {
		t.Errorf("restore of garbage: %+v", r)
	}
	// A backup changed after it was written (a flipped bit in a name),
	// with its checksum file beside it.
	changed := filepath.Join(t.TempDir(), "changed.db")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("before"), []byte("befor%"), 1)
	sum, err := os.ReadFile(file + ".sha256")
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.WriteFile(changed, b, 0o600), os.WriteFile(changed+".sha256", sum, 0o600)); err != nil {
		t.Fatal(err)
	}
	if r := cli(t, dir, nil, "restore", "--from", changed, "--force"); r.exit != 1 || !strings.Contains(r.stderr, "do not match the SHA-256 in "+changed+".sha256") {
		t.Errorf("restore of a changed backup: %+v", r)
	}
	// The plant created after the backup made event 2: its followers
	// resync, and follow after 3, the horizon past it.
	if r := cli(t, dir, nil, "restore", "--from", file, "--force"); r.exit != 0 || !strings.Contains(r.stderr, "1 plants, 1 active tokens, 0 webhook subscribers") ||
		!strings.Contains(r.stderr, "(it matched its checksum in "+file+".sha256)") ||
		!strings.Contains(r.stderr, "tokens revoked and webhook subscribers removed since the backup are active again") ||
		!strings.Contains(r.stderr, "the change feed goes on after event 3, past event 2") {
		t.Fatalf("restore --force: %+v", r)
	}
	s = serve(t, dir)
	if status, _, body := call(t, client, "GET", s.url+"/plants/1", token, ""); status != 200 || string(body) != `{"id":1,"name":"before"}` {
		t.Errorf("plant 1, in the backup: %d %s", status, body)
	}
	if status, _, _ := call(t, client, "GET", s.url+"/plants/2", token, ""); status != 404 {
		t.Errorf("plant 2, created after the backup: %d, want 404", status)
	}
	s.stop(t, syscall.SIGTERM)
	backupUsageRefusals(t, dir)
}

// backupUsageRefusals: a missing store is not backed up (nor created), a
// PostgreSQL store points to its own tools, wrong usage exits 2 without
// showing a password, and the help explains the flags.
func backupUsageRefusals(t *testing.T, dir string) {
	missing := filepath.Join(t.TempDir(), "missing.db")
	if r := cli(t, dir, nil, "backup", "--db", missing, "--to", filepath.Join(t.TempDir(), "b.db")); r.exit != 1 || !strings.Contains(r.stderr, "no store") {
		t.Errorf("backup of a missing store: %+v", r)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("backup created the store it was to copy")
	}
	pg := "postgres://plant:sekrit@127.0.0.1:1/db"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"backup", "--db", pg, "--to", "x"}, "pg_dump"},
		{[]string{"restore", "--db", pg, "--from", "x"}, "pg_restore"},
		{[]string{"backup"}, "--to"},
		{[]string{"restore"}, "--from"},
		{[]string{"backup", "--to", "x", "extra"}, "no arguments"},
	} {
		r := cli(t, dir, nil, c.args...)
		if r.exit != 2 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "sekrit") {
			t.Errorf("%q: %+v, want exit 2 and a message with %q", c.args, r, c.want)
		}
	}
	for _, c := range []struct {
		cmd   string
		flags []string
	}{
		{"backup", []string{"-to", "-db", "pg_dump"}},
		{"restore", []string{"-from", "-db", "-force", "Stop the server first"}},
	} {
		r := cli(t, dir, nil, c.cmd, "--help")
		for _, f := range c.flags {
			if r.exit != 0 || !strings.Contains(r.stdout, f) {
				t.Errorf("%s --help does not explain %s: %+v", c.cmd, f, r)
			}
		}
	}
	if r := cli(t, dir, nil, "--help"); !strings.Contains(r.stdout, "plantstore backup") || !strings.Contains(r.stdout, "plantstore restore") {
		t.Errorf("--help does not mention backup and restore:\n%s", r.stdout)
	}
}

// seedPlants writes n plants with negative ids straight into the store at
// path, which no server may be using, and returns their names by id.
func seedPlants(t *testing.T, path string, n int) map[int64]string {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	filler := strings.Repeat("x", 150)
	if _, err := raw.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO plants (id, name, created_at) SELECT -i, printf('seed %d ', i) || ?, 0 FROM n`, n, filler); err != nil {
		t.Fatal(err)
	}
	names := make(map[int64]string, n)
	for i := 1; i <= n; i++ {
		names[int64(-i)] = fmt.Sprintf("seed %d %s", i, filler)
	}
	return names
}

// A store that cannot be read is not replaced without --feed-after: the
// newest event id it gave is unknown, and the restored change feed could
// give its ids again. With --feed-after the feed goes on past it; into a
// new place, restore says where the feed goes on and how to move it.
func TestRestoreOverADamagedStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if r := cli(t, dir, nil, "token", "create", "--name", "me"); r.exit != 0 {
		t.Fatalf("token create: %+v", r)
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	if r := cli(t, dir, nil, "backup", "--to", file); r.exit != 0 || !strings.Contains(r.stderr, "its SHA-256 is in "+file+".sha256") {
		t.Fatalf("backup: %+v", r)
	}
	store := filepath.Join(dir, "plantstore.db")
	f, err := os.OpenFile(store, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, 64<<10), 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if r := cli(t, dir, nil, "restore", "--from", file, "--force"); r.exit != 1 || !strings.Contains(r.stderr, "cannot be read") || !strings.Contains(r.stderr, "--feed-after ID") {
		t.Errorf("restore over a damaged store: %+v", r)
	}
	for _, bad := range []string{"x", "-1", "1.5"} {
		if r := cli(t, dir, nil, "restore", "--from", file, "--force", "--feed-after", bad); r.exit != 2 || !strings.Contains(r.stderr, "--feed-after") {
			t.Errorf("--feed-after %s: %+v", bad, r)
		}
	}
	if r := cli(t, dir, []string{"PLANTSTORE_FEED_AFTER=40"}, "restore", "--from", file, "--force"); r.exit != 1 {
		t.Errorf("PLANTSTORE_FEED_AFTER took the flag's place: %+v", r)
	}
	if r := cli(t, dir, nil, "restore", "--from", file, "--force", "--feed-after", "40"); r.exit != 0 || !strings.Contains(r.stderr, "the change feed goes on after event 41, past event 40") {
		t.Errorf("restore --feed-after 40 over a damaged store: %+v", r)
	}
	other := t.TempDir()
	if r := cli(t, other, nil, "restore", "--from", file); r.exit != 0 || !strings.Contains(r.stderr, "the change feed goes on after event 0, the backup's newest; if clients followed a store that went further") {
		t.Errorf("restore into a new place: %+v", r)
	}
}
