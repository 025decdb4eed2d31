package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/webhook"
)

// The Python and Node receivers of docs/webhooks.md, copied from the page
// as they are, receive real deliveries from serve: each verifies and
// handles a delivery once, refuses a forged body and a stale timestamp,
// and handles a replayed event only once.
func TestWebhookReceiversInOtherLanguages(t *testing.T) {
	doc, err := os.ReadFile("../../docs/webhooks.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ lang, interpreter, file string }{
		{"python", "python3", "receiver.py"},
		{"js", "node", "receiver.mjs"},
	} {
		t.Run(tc.interpreter, func(t *testing.T) {
			t.Parallel()
			path, err := exec.LookPath(tc.interpreter)
			if err != nil {
				t.Skipf("%s is not installed, so the receiver of docs/webhooks.md in it is not run: %v", tc.interpreter, err)
			}
			m := regexp.MustCompile("(?s)\n```" + tc.lang + "\n(.*?)\n```\n").FindSubmatch(doc)
			if m == nil {
				t.Fatalf("docs/webhooks.md has no ```%s block", tc.lang)
			}
			testReceiver(t, path, tc.file, m[1])
		})
	}
}

func testReceiver(t *testing.T, interpreter, name string, program []byte) {
	dir := t.TempDir()
	script := filepath.Join(dir, name)
	if err := os.WriteFile(script, program, 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	hook := "http://127.0.0.1:" + port + "/plants-hook"
	mustToken(t, dir, "--name", "me") // makes the store: webhook add makes none
	add := cli(t, dir, nil, "webhook", "add", hook, "--events", "plant.created,plant.updated,plant.deleted")
	if add.exit != 0 {
		t.Fatalf("webhook add: exit %d, %s", add.exit, add.stderr)
	}
	secret := strings.TrimSpace(add.stdout)
	out, receiverLogs := startReceiver(t, interpreter, script, secret, port)

	token := mustToken(t, dir, "--name", "app")
	s := serve(t, dir, testWebhookFlags...)
	logs := func() string { return receiverLogs() + "\nserve's log:\n" + s.logs.String() }
	client := apitest.Client(t)
	for _, body := range []string{`{"id":7,"name":"Fern","tag":"indoor"}`, `{"id":9,"name":"Moss"}`} {
		if status, b := create(t, client, s.url, token, body); status != 200 {
			t.Fatalf("create %s: %d %s", body, status, b)
		}
	}
	awaitPrinted(t, out, "new plant 7: Fern (indoor)\n", logs)
	awaitPrinted(t, out, "new plant 9: Moss (no tag)\n", logs)
	// An update and a delete, whose bodies are events, not plants.
	if status, _, b, err := send(client, "PUT", s.url+"/plants/7", token, `{"name":"Fern","tag":"outdoor"}`); err != nil || status != 200 {
		t.Fatalf("update plant 7: %d %s %v", status, b, err)
	}
	if status, _, b, err := send(client, "DELETE", s.url+"/plants/9", token, ""); err != nil || status != 204 {
		t.Fatalf("delete plant 9: %d %s %v", status, b, err)
	}
	awaitPrinted(t, out, "updated plant 7: Fern (outdoor)\n", logs)
	awaitPrinted(t, out, "deleted plant 9: Moss (no tag)\n", logs)
	deadline := time.Now().Add(10 * time.Second)
	for subs := listSubscribers(t, dir, "plantstore.db"); subs[0].Delivered != 4 || subs[0].State != "active"; subs = listSubscribers(t, dir, "plantstore.db") {
		if time.Now().After(deadline) {
			t.Fatalf("the subscriber after four deliveries: %+v", subs[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	sendByHand(t, hook, secret, out, logs)
}

// startReceiver runs the receiver's program and waits for it to listen
// on port; it returns what the program prints and its output for
// failure messages.
func startReceiver(t *testing.T, interpreter, script, secret, port string) (*apitest.Buffer, func() string) {
	out, errs := &apitest.Buffer{}, &apitest.Buffer{}
	cmd := exec.Command(interpreter, script)
	cmd.Env = append(os.Environ(), "PLANTSTORE_WEBHOOK_SECRET="+secret, "PORT="+port)
	cmd.Stdout, cmd.Stderr = out, errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	logs := func() string { return "receiver's output:\n" + out.String() + errs.String() }
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			conn.Close()
			return out, logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver does not listen: %v\n%s", err, logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitPrinted waits up to 10 s for the receiver to print want.
func awaitPrinted(t *testing.T, out *apitest.Buffer, want string, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the receiver never printed %q\n%s", want, logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sendByHand posts to the receiver as an attacker or a retry would: it
// refuses what is forged, stale, signed with another key or unsigned, and
// handles an event once however often it arrives.
func sendByHand(t *testing.T, hook, secret string, out *apitest.Buffer, logs func() string) {
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	post := func(header http.Header, body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, hook, strings.NewReader(body))
		req.Header = header
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST to the receiver: %v\n%s", err, logs())
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	signed := `{"id":8,"name":"Ivy"}`
	now := time.Now()
	for _, tc := range []struct {
		what   string
		header http.Header
		body   string
		want   int
	}{
		{"a forged body", webhook.Headers(key, "msg_forged", now, []byte(signed)), `{"id":8,"name":"Poison ivy"}`, 401},
		{"a stale timestamp", webhook.Headers(key, "msg_stale", now.Add(-10*time.Minute), []byte(signed)), signed, 401},
		{"another key", webhook.Headers(bytes.Repeat([]byte("k"), 32), "msg_otherkey", now, []byte(signed)), signed, 401},
		{"no signature", func() http.Header {
			h := webhook.Headers(key, "msg_nosig", now, []byte(signed))
			h.Del("webhook-signature")
			return h
		}(), signed, 401},
		{"a delivery", webhook.Headers(key, "msg_replayed", now, []byte(signed)), signed, 204},
		{"the same event again", webhook.Headers(key, "msg_replayed", now.Add(time.Second), []byte(signed)), signed, 204},
	} {
		if got := post(tc.header, tc.body); got != tc.want {
			t.Errorf("%s: %d, want %d\n%s", tc.what, got, tc.want, logs())
		}
	}
	awaitPrinted(t, out, "new plant 8: Ivy (no tag)\n", logs)
	time.Sleep(100 * time.Millisecond)
	if n := strings.Count(out.String(), "new plant 8:"); n != 1 || strings.Contains(out.String(), "Poison") {
		t.Errorf("plant 8 handled %d times, or the forged one at all:\n%s", n, logs())
	}
}
