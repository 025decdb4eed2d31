//go:build unix

package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/apitest"
)

// The audit's case, against the binary: the store's file deleted while
// serve runs. Creates stop answering 200 within a second, with a 503
// saying why; /readyz fails; the log says so once, at ERROR. Killed, the
// server leaves the store's log without its file, and a new serve
// refuses to make a new store beside it, where it used to make one and
// discard the log.
func TestDeletedStoreStopsServing(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "swap")
	s := serveProcess(t, dir)
	client := apitest.Client(t)
	if status, body := create(t, client, s.url, token, `{"id":1,"name":"before"}`); status != 200 {
		t.Fatalf("create before: %d %s", status, body)
	}
	path := filepath.Join(dir, "plantstore.db")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	acked := 0
	for id := 2; ; id++ {
		status, body := create(t, client, s.url, token, fmt.Sprintf(`{"id":%d,"name":"after"}`, id))
		if status == 200 {
			if acked++; time.Since(removed) > 5*time.Second {
				t.Fatalf("%d creates answered 200 for 5 s after the store's file was deleted", acked)
			}
			continue
		}
		if status != 503 || !strings.Contains(body, "deleted or replaced while serving") {
			t.Fatalf("create %d after the deletion: %d %s; want 503 saying the file was deleted or replaced", id, status, body)
		}
		break
	}
	t.Logf("%d creates answered 200 in the %v before the deletion was found", acked, time.Since(removed).Round(time.Millisecond))
	if status, body := create(t, client, s.url, token, `{"id":1000000,"name":"later"}`); status != 503 {
		t.Errorf("a later create: %d %s, want 503", status, body)
	}
	resp, err := client.Get(s.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz after the deletion: %d, want 503", resp.StatusCode)
	}
	time.Sleep(600 * time.Millisecond) // the log is written every 200 ms
	if n := strings.Count(s.logs.String(), `"level":"ERROR","msg":"the store's file was deleted or replaced while serving; restart the server"`); n != 1 {
		t.Errorf("%d ERROR lines saying the file went, want 1; the log:\n%s", n, s.logs)
	}

	s.kill(t)
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("the killed server's log: %v", err)
	}
	r := cli(t, dir, nil, "serve", "--addr", "127.0.0.1:0")
	if r.exit != 1 || !strings.Contains(r.stderr, "refusing to make a new store") || !strings.Contains(r.stderr, path+"-wal") {
		t.Errorf("serve beside the leftover log: exit %d, stderr %q; want exit 1, refusing and naming %s-wal", r.exit, r.stderr, path)
	}
	if _, err := os.Stat(path); err == nil {
		t.Errorf("serve made a new store at %s beside the leftover log", path)
	}
	// token create may make a store too: the same refusal.
	r = cli(t, dir, nil, "token", "create", "--name", "new")
	if r.exit != 1 || !strings.Contains(r.stderr, "refusing to make a new store") {
		t.Errorf("token create beside the leftover log: exit %d, stderr %q; want exit 1, refusing", r.exit, r.stderr)
	}
}

// The store's file replaced while serve runs (mv backup.db PATH), then
// the server killed: its log, the old store's, is left beside the new
// file, and SQLite would apply it there, mixing the old store's last
// writes into the new file. A note beside the store (PATH-swapped) makes
// every command refuse, saying what to do; done, the new file serves as
// it is. Stopped cleanly instead, the server takes the log and the note
// away itself.
func TestReplacedStoreLeavesANote(t *testing.T) {
	for _, stop := range []string{"killed", "stopped", "restored"} {
		t.Run(stop, func(t *testing.T) {
			dir := t.TempDir()
			token := mustToken(t, dir, "--name", "swap")
			s := serveProcess(t, dir)
			client := apitest.Client(t)
			if status, body := create(t, client, s.url, token, `{"id":1,"name":"in the backup"}`); status != 200 {
				t.Fatalf("create: %d %s", status, body)
			}
			if r := cli(t, dir, nil, "backup", "--to", "backup.db"); r.exit != 0 {
				t.Fatalf("backup: exit %d, %s", r.exit, r.stderr)
			}
			if status, body := create(t, client, s.url, token, `{"id":2,"name":"after the backup"}`); status != 200 {
				t.Fatalf("create: %d %s", status, body)
			}
			if r := cli(t, dir, nil, "backup", "--to", "latest.db"); r.exit != 0 {
				t.Fatalf("backup: exit %d, %s", r.exit, r.stderr)
			}
			path := filepath.Join(dir, "plantstore.db")
			if err := os.Rename(filepath.Join(dir, "backup.db"), path); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for id := 3; ; id++ {
				status, _ := create(t, client, s.url, token, fmt.Sprintf(`{"id":%d,"name":"x"}`, id))
				if status == 503 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("creates still answered 5 s after the store's file was replaced")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if _, err := os.Stat(path + "-swapped"); err != nil {
				t.Errorf("no note beside the replaced store: %v", err)
			}
			if stop == "stopped" {
				if code := s.stop(t, os.Interrupt); code != 0 {
					t.Errorf("serve stopped with exit %d", code)
				}
				if _, err := os.Stat(path + "-swapped"); err == nil {
					t.Error("the note outlived a clean stop, which removed the old log")
				}
			} else {
				s.kill(t)
				for _, args := range [][]string{{"serve", "--addr", "127.0.0.1:0"}, {"token", "list"}, {"backup", "--to", "b2.db"}} {
					r := cli(t, dir, nil, args...)
					if r.exit != 1 || !strings.Contains(r.stderr, "refusing to open the store") || !strings.Contains(r.stderr, path+"-swapped") {
						t.Errorf("%v after the killed server: exit %d, stderr %q; want exit 1, refusing and naming the note", args, r.exit, r.stderr)
					}
				}
				if stop == "restored" {
					// The other way the message gives. The old store's
					// change feed cannot be read beside the new file: its
					// newest event is the operator's to give.
					if r := cli(t, dir, nil, "restore", "--from", "latest.db", "--force"); r.exit != 1 || !strings.Contains(r.stderr, "--feed-after ID") {
						t.Errorf("restore --force after the killed server, without --feed-after: exit %d, %s", r.exit, r.stderr)
					}
					if r := cli(t, dir, nil, "restore", "--from", "latest.db", "--force", "--feed-after", "1000"); r.exit != 0 {
						t.Fatalf("restore --force --feed-after after the killed server: exit %d, %s", r.exit, r.stderr)
					}
				} else {
					// As the message says, for the new file.
					for _, name := range []string{"-wal", "-shm", "-swapped"} {
						os.Remove(path + name)
					}
				}
			}
			s = serveProcess(t, dir)
			want := 404 // the first backup's content alone
			if stop == "restored" {
				want = 200
			}
			if status, body := request(t, client, "GET", s.url+"/plants/2", token, ""); status != want {
				t.Errorf("plant 2, written after the first backup, in the store now: %d %s; want %d", status, body, want)
			}
			if status, body := request(t, client, "GET", s.url+"/plants/1", token, ""); status != 200 {
				t.Errorf("plant 1, in the backup: %d %s", status, body)
			}
		})
	}
}

// The store's file moved away while serve runs, nothing put in its place,
// then the server stopped cleanly: the moved file alone holds every write
// that was answered 200 (its log left at the old name used to hold them),
// and moved back it serves as it was.
func TestMovedStoreGetsEveryWriteAtAStop(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "swap")
	s := serveProcess(t, dir)
	client := apitest.Client(t)
	path := filepath.Join(dir, "plantstore.db")
	var acked []int
	for id := 1; id <= 20; id++ {
		if status, body := create(t, client, s.url, token, fmt.Sprintf(`{"id":%d,"name":"before"}`, id)); status != 200 {
			t.Fatalf("create %d: %d %s", id, status, body)
		}
		acked = append(acked, id)
	}
	moved := filepath.Join(dir, "moved.db")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for id := 21; ; id++ {
		status, _ := create(t, client, s.url, token, fmt.Sprintf(`{"id":%d,"name":"after"}`, id))
		if status == 503 {
			break
		}
		if status == 200 {
			acked = append(acked, id)
		}
		if time.Now().After(deadline) {
			t.Fatal("creates still answered 5 s after the store's file was moved")
		}
	}
	if code := s.stop(t, os.Interrupt); code != 0 {
		t.Errorf("serve stopped with exit %d", code)
	}
	// The moved file alone, in a directory of its own.
	alone := t.TempDir()
	data, err := os.ReadFile(moved)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(alone, "plantstore.db"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	s = serveProcess(t, alone)
	for _, id := range acked {
		if status, body := request(t, client, "GET", fmt.Sprintf("%s/plants/%d", s.url, id), token, ""); status != 200 {
			t.Fatalf("plant %d, answered 200 before the stop, in the moved file alone: %d %s (of %d acknowledged)", id, status, body, len(acked))
		}
	}
	if code := s.stop(t, os.Interrupt); code != 0 {
		t.Errorf("serve on the moved file stopped with exit %d", code)
	}
	// Moved back, as operations.md says.
	if err := os.Rename(moved, path); err != nil {
		t.Fatal(err)
	}
	s = serveProcess(t, dir)
	if status, body := request(t, client, "GET", fmt.Sprintf("%s/plants/%d", s.url, acked[len(acked)-1]), token, ""); status != 200 {
		t.Errorf("the last acknowledged plant, the file moved back: %d %s", status, body)
	}
}
