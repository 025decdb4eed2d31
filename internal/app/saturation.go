package app

import (
	"runtime/metrics"
	"sync"
	"time"
)

// saturation says whether this process's goroutines wait for a CPU: the
// 90th percentile of the time the goroutines that became runnable since
// the last look waited before they ran (runtime/metrics'
// /sched/latencies:seconds), over threshold. Most goroutines run at once
// (one readied by a channel or the poller just before the P takes it),
// so the median stays at a microsecond or two even on a full core; the
// tail is what grows with queueing: tens of microseconds idle, hundreds
// and more when the CPUs the process may use (a core, a quota) are full.
// It looks at most every interval, and answers the last look in between.
//
// A look that found the process saturated holds for hold: under a
// saturating load some looks of 10 ms still fall under the threshold,
// and each such look let a window of deliveries go (up to a thousand,
// about 100 ms of CPU); held, the deliveries wait until the load has
// been gone for hold.
type saturation struct {
	threshold, interval, hold time.Duration
	now                       func() time.Time
	look                      func() bool // the process's state now

	mu     sync.Mutex
	sample []metrics.Sample
	counts []uint64 // the histogram's counts at the last look
	at     time.Time
	busy   bool
	until  time.Time // when the last saturated look stops holding
}

const schedLatencies = "/sched/latencies:seconds"

func newSaturation(threshold, interval, hold time.Duration) *saturation {
	s := &saturation{threshold: threshold, interval: interval, hold: hold, now: time.Now,
		sample: []metrics.Sample{{Name: schedLatencies}}}
	s.look = s.schedLatency
	return s
}

// Saturated reports the last look, looking again if it is old, or true
// while a saturated look holds.
func (s *saturation) Saturated() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(s.at) >= s.interval {
		s.at = now
		s.busy = s.look()
		if s.busy {
			s.until = now.Add(s.hold)
		}
	}
	return s.busy || now.Before(s.until)
}

// schedLatency says whether the 90th percentile of the scheduling
// latencies since the last look is over the threshold.
func (s *saturation) schedLatency() bool {
	metrics.Read(s.sample)
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return false // not reported by this runtime
	}
	h := s.sample[0].Value.Float64Histogram()
	if len(s.counts) != len(h.Counts) {
		s.counts = make([]uint64, len(h.Counts))
		copy(s.counts, h.Counts)
		return false
	}
	var total uint64
	for i, c := range h.Counts {
		total += c - s.counts[i]
	}
	defer copy(s.counts, h.Counts)
	// The bucket that holds the 90th percentile of what ran since the
	// last look; its lower bound is what that goroutine waited at least.
	var seen uint64
	for i, c := range h.Counts {
		seen += c - s.counts[i]
		if total > 0 && 10*seen >= 9*total {
			return h.Buckets[i] >= s.threshold.Seconds()
		}
	}
	return false
}
