package main

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/postgres/pgtest"
)

// Two instances on one database: every event goes out once, whichever
// instance took the create.
func TestPostgresWebhooksOncePerEvent(t *testing.T) {
	db := pgtest.NewDatabase(t)
	token := pgToken(t, db, "app")
	r := newReceiver(t)
	subscribe(t, t.TempDir(), db, r)
	servers := startServes(t, 2, db, testWebhookFlags...)
	client := pgClient(t)
	logs := func() string { return logsOf(servers...) }

	// One after another, alternating instances.
	const sequential = 20
	for i := int64(1); i <= sequential; i++ {
		s := servers[i%2]
		if a := do(client, "POST", s.url+"/plants", token, plantBody(i)); a.status != 200 {
			t.Fatalf("create %d through %s: %v", i, s.url, a)
		}
	}
	// Different plants go side by side, in any order.
	plants := r.awaitDelivered(sequential, 20*time.Second, logs)
	if !slices.Equal(slices.Sorted(slices.Values(plants)), seq(1, sequential)) {
		t.Errorf("delivered %v, want 1..%d", plants, sequential)
	}

	// Then a burst through both at once.
	const burst = 200
	var wg sync.WaitGroup
	for i := int64(sequential + 1); i <= sequential+burst; i++ {
		wg.Go(func() {
			if a := do(client, "POST", servers[i%2].url+"/plants", token, plantBody(i)); a.status != 200 {
				t.Errorf("create %d: %v", i, a)
			}
		})
	}
	wg.Wait()
	r.awaitDelivered(sequential+burst, 30*time.Second, logs)
	time.Sleep(500 * time.Millisecond) // time for any duplicate to arrive
	plants, times := r.delivered()
	if len(plants) != sequential+burst || len(times) != sequential+burst {
		t.Errorf("%d deliveries of %d events, want %d of %d", len(plants), len(times), sequential+burst, sequential+burst)
	}
	for id, n := range times {
		if n != 1 {
			t.Errorf("event %s delivered %d times in a normal run", id, n)
		}
	}
	if got := slices.Sorted(slices.Values(plants)); !slices.Equal(got, seq(1, sequential+burst)) {
		t.Errorf("plants announced: %v", got)
	}
	sent := 0
	for _, s := range servers {
		sent += countLines(s.logs.String(), `"msg":"webhook delivered"`)
	}
	if sent != sequential+burst {
		t.Errorf("the instances logged %d deliveries, want %d", sent, sequential+burst)
	}
}

// An instance killed while it holds a subscriber's lease: another takes
// the subscriber over once the lease runs out, and the event goes out.
func TestPostgresWebhookLeaseTakeover(t *testing.T) {
	db := pgtest.NewDatabase(t)
	token := pgToken(t, db, "app")
	r := newReceiver(t)
	subscribe(t, t.TempDir(), db, r)
	// Lease = 3 x the attempt timeout, the least the service allows.
	flags := append(slices.Clone(testWebhookFlags), "--webhook-timeout", "1s", "--webhook-lease", "3s")
	first := startServeProcesses(t, 1, db, flags...)[0] // killed below
	client := pgClient(t)

	// The receiver holds the first request, so the first instance is
	// mid-attempt, lease held, when it is killed.
	hold := make(chan struct{})
	defer close(hold)
	r.mu.Lock()
	r.hold = hold
	r.mu.Unlock()
	if a := do(client, "POST", first.url+"/plants", token, plantBody(1)); a.status != 200 {
		t.Fatalf("create: %v", a)
	}
	select {
	case <-r.arrived:
	case <-time.After(10 * time.Second):
		t.Fatalf("the first attempt never arrived\n%s", first.logs)
	}
	killed := time.Now()
	first.kill(t)
	// The killed instance's request ends unanswered, when the receiver
	// sees its connection go; releasing it here could race that and
	// count it delivered.
	r.mu.Lock()
	r.hold = nil
	r.mu.Unlock()

	second := startServes(t, 1, db, flags...)[0]
	r.awaitDelivered(1, 15*time.Second, func() string { return logsOf(first, second) })
	took := time.Since(killed)
	t.Logf("delivered by the second instance %v after the first was killed", took.Round(time.Millisecond))
	if took < 2*time.Second {
		t.Errorf("delivered %v after the kill, before the 3 s lease could run out", took)
	}
	if took > 8*time.Second {
		t.Errorf("delivered %v after the kill; the lease is 3 s", took)
	}
	if plants, _ := r.delivered(); !slices.Equal(plants, []int64{1}) {
		t.Errorf("delivered %v, want plant 1", plants)
	}
}

func seq(from, to int64) []int64 {
	var s []int64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func countLines(logs, substr string) int {
	n := 0
	for line := range strings.Lines(logs) {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}
