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
	s := newSaturation(500*time.Microsecond, 0)
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
