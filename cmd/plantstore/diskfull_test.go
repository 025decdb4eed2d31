//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/plantstore/plantstore/internal/apitest"
)

// The store fills up while the service runs: creates, updates and deletes
// answer 507 (or 503) with an Error and change nothing, reads go on, and
// once space returns the same process takes writes again, without a
// restart.
func TestDiskFull(t *testing.T) {
	// A full file system: ENOSPC, which SQLite reports as SQLITE_FULL.
	t.Run("tmpfs", func(t *testing.T) {
		mnt := mountTmpfs(t, 2<<20)
		filler := filepath.Join(mnt, "filler")
		testStoreFull(t, mnt,
			func(*server) { fill(t, filler) },
			func(*server) {
				if err := os.Remove(filler); err != nil {
					t.Fatal(err)
				}
			},
			507)
	})
	// A file-size limit (RLIMIT_FSIZE) on the running server: writes past
	// it fail with EFBIG (Go ignores SIGXFSZ), which SQLite reports as
	// SQLITE_IOERR_WRITE, or as SQLITE_FULL when a write is cut short.
	// Needs no privilege.
	t.Run("file size limit", func(t *testing.T) {
		dir := t.TempDir()
		testStoreFull(t, dir,
			func(s *server) {
				var largest int64
				for _, suffix := range []string{"", "-wal"} {
					if fi, err := os.Stat(filepath.Join(dir, "plantstore.db"+suffix)); err == nil {
						largest = max(largest, fi.Size())
					}
				}
				setFileSizeLimit(t, s, uint64(largest))
			},
			func(s *server) { setFileSizeLimit(t, s, unlimited) },
			507, 503)
	})
}

// testStoreFull serves a store in dir, fills it with full, checks the
// answers while full (refused writes answer one of statuses), frees it
// with free and checks that the service takes writes again.
func testStoreFull(t *testing.T, dir string, full, free func(*server), statuses ...int) {
	path := filepath.Join(dir, "plantstore.db")
	cwd := t.TempDir()
	token := mustToken(t, cwd, "--name", "full", "--db", path)
	s := serveProcess(t, cwd, "--db", path) // a process, for its file size limit
	api := apitest.Client(t)
	acked := map[int64]string{}
	for id := int64(1); id <= 10; id++ {
		mustCreate(t, api, s.url, token, id, acked)
	}

	full(s)
	// Creates fail once SQLite's files must grow: at once, or after a
	// few that fit in space the files already hold.
	refused := map[int64]int{}
	for id := int64(100); len(refused) < 5; id++ {
		if id == 1100 {
			t.Fatalf("1000 creates on a full store, none refused")
		}
		name := fmt.Sprintf("plant %d", id)
		status, header, body := call(t, api, "POST", s.url+"/plants", token, fmt.Sprintf(`{"id":%d,"name":%q}`, id, name))
		if status == 200 {
			acked[id] = name
			continue
		}
		checkErrorAnswer(t, "create on a full store", status, header, body, statuses...)
		refused[id] = status
	}
	for _, w := range []struct{ method, path, body string }{
		{"PUT", "/plants/1", `{"name":"renamed"}`},
		{"DELETE", "/plants/2", ""},
	} {
		status, header, body := call(t, api, w.method, s.url+w.path, token, w.body)
		checkErrorAnswer(t, w.method+" on a full store", status, header, body, statuses...)
		t.Logf("%s on the full store: %d", w.method, status)
	}
	t.Logf("creates refused on the full store: %v (id: status)", refused)
	checkReads(t, api, s.url, token, acked)
	status, _, _ := call(t, api, "GET", s.url+"/readyz", "", "")
	t.Logf("GET /readyz on the full store: %d", status)

	free(s)
	freed := time.Now()
	awaitCreate(t, api, s.url, token, 1_000_000, acked)
	t.Logf("a create succeeded %v after space returned", time.Since(freed).Round(time.Millisecond))
	// A 507 promised that nothing was stored: the plant is not there, and
	// the client's retry now succeeds.
	for id, status := range refused {
		if status == 507 {
			if got, _, body := call(t, api, "GET", fmt.Sprintf("%s/plants/%d", s.url, id), token, ""); got != 404 {
				t.Errorf("plant %d, refused with 507, is there: %d %s", id, got, body)
			}
		}
		mustCreate(t, api, s.url, token, id, acked)
	}
	if status, _, body := call(t, api, "PUT", s.url+"/plants/1", token, `{"name":"renamed"}`); status != 200 {
		t.Errorf("PUT after space returned: %d %s", status, body)
	} else {
		acked[1] = "renamed"
	}
	checkReads(t, api, s.url, token, acked)
	if code := s.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	checkStore(t, path, acked)
}

// The store's files turn read-only while the service runs (chattr +i: as
// root, file modes do not stop writes, and a file system with a file open
// for writing cannot be remounted read-only): writes answer 503 with an
// Error, reads go on, and once the files are writable again the same
// process takes writes.
func TestReadOnlyStore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making files immutable (chattr +i) needs root (CAP_LINUX_IMMUTABLE); CI runs as root")
	}
	chattr, err := exec.LookPath("chattr")
	if err != nil {
		t.Skipf("chattr (e2fsprogs) is needed to make the store's files immutable: %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "plantstore.db")
	token := mustToken(t, dir, "--name", "ro")
	s := serve(t, dir)
	api := apitest.Client(t)
	acked := map[int64]string{}
	for id := int64(1); id <= 10; id++ {
		mustCreate(t, api, s.url, token, id, acked)
	}

	// The database and its log, not the -shm file: that is SQLite's
	// shared-memory index, which readers write too. Made immutable, it
	// fails every read (SQLITE_IOERR_IN_PAGE, so 503), as it would on a
	// file system that turned read-only under a running SQLite.
	var files []string
	for _, suffix := range []string{"", "-wal"} {
		if _, err := os.Stat(path + suffix); err == nil {
			files = append(files, path+suffix)
		}
	}
	immutable := func(flag string) error {
		out, err := exec.Command(chattr, append([]string{flag}, files...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("chattr %s: %v: %s", flag, err, out)
		}
		return nil
	}
	if err := immutable("+i"); err != nil {
		t.Skipf("the file system of %s cannot make files immutable: %v", dir, err)
	}
	// Before t.TempDir removes them, which it could not do.
	t.Cleanup(func() { immutable("-i") })

	for id := int64(100); id < 105; id++ {
		status, header, body := call(t, api, "POST", s.url+"/plants", token, fmt.Sprintf(`{"id":%d,"name":"plant %d"}`, id, id))
		checkErrorAnswer(t, "create on a read-only store", status, header, body, 503)
	}
	for _, w := range []struct{ method, path, body string }{
		{"PUT", "/plants/1", `{"name":"renamed"}`},
		{"DELETE", "/plants/2", ""},
	} {
		status, header, body := call(t, api, w.method, s.url+w.path, token, w.body)
		checkErrorAnswer(t, w.method+" on a read-only store", status, header, body, 503)
	}
	checkReads(t, api, s.url, token, acked)

	if err := immutable("-i"); err != nil {
		t.Fatal(err)
	}
	writable := time.Now()
	awaitCreate(t, api, s.url, token, 1_000_000, acked)
	t.Logf("a create succeeded %v after the files were writable again", time.Since(writable).Round(time.Millisecond))
	for id := int64(100); id < 105; id++ {
		mustCreate(t, api, s.url, token, id, acked)
	}
	checkReads(t, api, s.url, token, acked)
	if code := s.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	checkStore(t, path, acked)
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, for the
// length of the test. Call it before starting a server that uses it: the
// server must be gone before the unmount.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (CAP_SYS_ADMIN); CI runs as root")
	}
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("mount a tmpfs on %s (needs CAP_SYS_ADMIN): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

// unlimited is RLIM_INFINITY, which package syscall has as a signed constant.
const unlimited = ^uint64(0)

// setFileSizeLimit sets the soft limit on the size of files s's process
// writes (RLIMIT_FSIZE); the hard limit stays, so raising it back to
// RLIM_INFINITY needs no privilege.
func setFileSizeLimit(t *testing.T, s *server, limit uint64) {
	t.Helper()
	var old syscall.Rlimit
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(s.cmd.Process.Pid), syscall.RLIMIT_FSIZE, 0, uintptr(unsafe.Pointer(&old)), 0, 0); errno != 0 {
		t.Fatalf("prlimit: %v", errno)
	}
	limits := syscall.Rlimit{Cur: limit, Max: old.Max}
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(s.cmd.Process.Pid), syscall.RLIMIT_FSIZE, uintptr(unsafe.Pointer(&limits)), 0, 0, 0); errno != 0 {
		t.Fatalf("prlimit: %v", errno)
	}
}

// fill writes a file at path until its file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); errors.Is(err, syscall.ENOSPC) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

// checkErrorAnswer checks that a refused write answered one of statuses
// with the contract's Error and a Retry-After.
func checkErrorAnswer(t *testing.T, what string, status int, header http.Header, body []byte, statuses ...int) {
	t.Helper()
	if !slices.Contains(statuses, status) {
		t.Fatalf("%s: %d %s, want one of %v", what, status, body, statuses)
	}
	var e struct {
		Error   int    `json:"error"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error != status || e.Message == "" {
		t.Errorf("%s: %d with body %s, want an Error", what, status, body)
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	if header.Get("Retry-After") == "" {
		t.Errorf("%s: %d without Retry-After", what, status)
	}
}

func mustCreate(t *testing.T, client *http.Client, url, token string, id int64, acked map[int64]string) {
	t.Helper()
	name := fmt.Sprintf("plant %d", id)
	if status, _, body := call(t, client, "POST", url+"/plants", token, fmt.Sprintf(`{"id":%d,"name":%q}`, id, name)); status != 200 {
		t.Fatalf("create %d: %d %s", id, status, body)
	}
	acked[id] = name
}

// awaitCreate creates plant id, retrying refusals for up to 5 s.
func awaitCreate(t *testing.T, client *http.Client, url, token string, id int64, acked map[int64]string) {
	t.Helper()
	name := fmt.Sprintf("plant %d", id)
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, _, body := call(t, client, "POST", url+"/plants", token, fmt.Sprintf(`{"id":%d,"name":%q}`, id, name))
		if status == 200 {
			acked[id] = name
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("creates still fail 5 s after the store became writable: %d %s", status, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkReads reads every acknowledged plant, one by one and by listing.
func checkReads(t *testing.T, client *http.Client, url, token string, acked map[int64]string) {
	t.Helper()
	for id, name := range acked {
		status, _, body := call(t, client, "GET", fmt.Sprintf("%s/plants/%d", url, id), token, "")
		var p struct{ Name string }
		if status != 200 || json.Unmarshal(body, &p) != nil || p.Name != name {
			t.Errorf("GET /plants/%d: %d %s, want %q", id, status, body, name)
		}
	}
	status, _, body := call(t, client, "GET", url+"/plants?limit=1000", token, "")
	var page []struct {
		ID   int64
		Name string
	}
	if status != 200 || json.Unmarshal(body, &page) != nil {
		t.Fatalf("GET /plants: %d %s", status, body)
	}
	listed := map[int64]string{}
	for _, p := range page {
		listed[p.ID] = p.Name
	}
	for id, name := range acked {
		if listed[id] != name {
			t.Errorf("GET /plants lists plant %d as %q, want %q", id, listed[id], name)
		}
	}
}

// A backup onto a full file system names that file system, not the store
// it copies, and leaves nothing there.
func TestBackupOntoAFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, 64<<10)
	dir := t.TempDir()
	if r := cli(t, dir, nil, "token", "create", "--name", "me"); r.exit != 0 {
		t.Fatalf("token create: %+v", r)
	}
	s := serveProcess(t, dir)
	token := strings.TrimSpace(cli(t, dir, nil, "token", "create", "--name", "writer").stdout)
	c := &http.Client{Timeout: 10 * time.Second}
	for i := range 400 { // a store larger than the file system
		body := fmt.Sprintf(`{"id":%d,"name":"%s"}`, i+1, strings.Repeat("n", 190))
		if status, _, b := call(t, c, "POST", s.url+"/plants", token, body); status != 200 {
			t.Fatalf("create %d: %d %s", i+1, status, b)
		}
	}
	to := filepath.Join(mnt, "backup.db")
	r := cli(t, dir, nil, "backup", "--to", to)
	if r.exit != 1 || !strings.Contains(r.stderr, "backup to "+to+": the disk it is on is full") {
		t.Errorf("backup onto a full disk: %+v", r)
	}
	if entries, _ := os.ReadDir(mnt); len(entries) != 0 {
		t.Errorf("the failed backup left %v", entries)
	}
}
