package main

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore/client"
)

// The Go client against the real server's limits (issue 17 point 7): a
// 429 and a 503 come back as errors carrying the server's Retry-After,
// and with WithRetries the client waits that long and gets its answer.
func TestGoClientUnderLimits(t *testing.T) {
	t.Run("429", goClientThrottled)

	t.Run("503", goClientBusy)
}

// goClientBusy: with the only in-flight slot held the client gets a 503
// with Retry-After, and with retries gets its answer once the slot is free.
func goClientBusy(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "go")
	// One token here: its own cap must not come first.
	s := serve(t, dir, "--max-in-flight", "1", "--max-in-flight-per-token", "8", "--body-read-timeout", "30s")
	// A create whose body never ends holds the only slot.
	hold := func() net.Conn {
		conn := limDial(t, s.url)
		fmt.Fprintf(conn, "POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"id\"", token)
		return conn
	}
	held := hold()
	plain, err := client.New(s.url, token)
	if err != nil {
		t.Fatal(err)
	}
	// The held create is in flight once the server has read its
	// headers, in its own time; a get that beat it to the slot
	// leaves it refused: hold again.
	var busy error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, busy = plain.Get(t.Context(), 1)
		if client.StatusCode(busy) == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with a create holding the only slot, a get still gets %v\n%s", busy, s.logs)
		}
		if strings.Contains(s.logs.String(), `"remote":"`+held.LocalAddr().String()+`","limit":"in_flight"`) {
			held.Close()
			held = hold()
		}
	}
	if wait := client.RetryAfter(busy); wait < time.Second {
		t.Errorf("RetryAfter of the 503: %v, want at least 1 s", wait)
	}

	// With retries, a get made while the slot is held waits and gets
	// its answer once the slot is free.
	retrying, err := client.New(s.url, token, client.WithRetries(3))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := retrying.Get(t.Context(), 1)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	held.Close()
	select {
	case err := <-done:
		if client.StatusCode(err) != 404 {
			t.Errorf("a get with retries once the slot was free: %v, want plant 1's 404", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a get with retries did not end")
	}
	if !strings.Contains(s.logs.String(), `"status":503`) {
		t.Errorf("the server answered no 503:\n%s", s.logs)
	}
}

// goClientThrottled: past --rate-limit the client gets a 429 with the
// server's Retry-After, and with retries waits it out.
func goClientThrottled(t *testing.T) {
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "go")
	s := serve(t, dir, "--rate-limit", "1", "--rate-burst", "1")
	plain, err := client.New(s.url, token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Create(t.Context(), client.Plant{ID: 1, Name: "Fern"}); err != nil {
		t.Fatal(err)
	}
	// The bucket held one request and the create took it: the next
	// one, at once, is 429, unless a slow machine let the bucket
	// refill in between (then it took it again, and the next is).
	var throttled error
	for range 5 {
		if _, throttled = plain.Get(t.Context(), 1); throttled != nil {
			break
		}
	}
	if client.StatusCode(throttled) != 429 {
		t.Fatalf("five gets at once with --rate-limit 1: %v, want a 429 *client.Error", throttled)
	}
	if wait := client.RetryAfter(throttled); wait != time.Second {
		t.Errorf("RetryAfter of the 429: %v, want the server's 1 s", wait)
	}

	retrying, err := client.New(s.url, token, client.WithRetries(3))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 3 {
		if p, err := retrying.Get(t.Context(), 1); err != nil || p.Name != "Fern" {
			t.Fatalf("a get with retries under --rate-limit 1: %+v, %v", p, err)
		}
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("three gets at one a second took %v: the client did not wait for Retry-After", took)
	}
}
