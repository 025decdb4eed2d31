package app

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Idle, the process is not saturated; with more goroutines wanting one
// CPU than it can run, it is.
func TestSaturation(t *testing.T) {
	s := newSaturation(500*time.Microsecond, 0, 0)
	s.Saturated() // the first look only counts
	// Idle: some look says so (on a machine busy with other processes a
	// look may catch a wake-up the OS delayed).
	idle := false
	for range 20 {
		time.Sleep(20 * time.Millisecond)
		if !s.Saturated() {
			idle = true
			break
		}
	}
	if !idle {
		t.Error("an idle process is saturated at every look")
	}

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var stop atomic.Bool
	var spinners sync.WaitGroup
	for range 16 {
		spinners.Go(func() {
			for !stop.Load() {
				deadline := time.Now().Add(200 * time.Microsecond)
				for time.Now().Before(deadline) {
				}
				runtime.Gosched()
			}
		})
	}
	defer func() { stop.Store(true); spinners.Wait() }()
	time.Sleep(50 * time.Millisecond)
	s.Saturated()
	time.Sleep(50 * time.Millisecond)
	if !s.Saturated() {
		t.Error("16 goroutines spinning on one P: not saturated")
	}
}

// A saturated look holds for hold: the looks in between that find the
// process idle do not end it; once hold has passed with none saturated,
// it ends.
func TestSaturationHolds(t *testing.T) {
	s := newSaturation(time.Millisecond, 10*time.Millisecond, 100*time.Millisecond)
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	looks := []bool{true, false, false, false, true, false}
	s.look = func() bool {
		b := looks[0]
		looks = looks[1:]
		return b
	}
	for i, step := range []struct {
		after time.Duration
		want  bool
	}{
		{0, true},                       // look 1: saturated
		{5 * time.Millisecond, true},    // no look: the last one's answer
		{10 * time.Millisecond, true},   // look 2, idle: held
		{95 * time.Millisecond, false},  // look 3, idle, 110 ms after the saturated one
		{5 * time.Millisecond, false},   // no look
		{10 * time.Millisecond, false},  // look 4, idle
		{10 * time.Millisecond, true},   // look 5: saturated again
		{200 * time.Millisecond, false}, // look 6, idle, past the hold
	} {
		now = now.Add(step.after)
		if got := s.Saturated(); got != step.want {
			t.Errorf("step %d: Saturated() = %v, want %v", i+1, got, step.want)
		}
	}
	if len(looks) != 0 {
		t.Errorf("%d looks left, want every one taken", len(looks))
	}
}
