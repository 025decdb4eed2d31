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
// tail is what grows with queueing: tens of microseconds idle, about a
// millisecond and more when the CPUs the process may use (a core, a
// quota) are full. It looks at most every interval, and answers the last
// look in between.
type saturation struct {
	threshold, interval time.Duration

	mu     sync.Mutex
	sample []metrics.Sample
	counts []uint64 // the histogram's counts at the last look
	at     time.Time
	busy   bool
}

const schedLatencies = "/sched/latencies:seconds"

func newSaturation(threshold, interval time.Duration) *saturation {
	return &saturation{threshold: threshold, interval: interval, sample: []metrics.Sample{{Name: schedLatencies}}}
}

// Saturated reports the last look, looking again if it is old.
func (s *saturation) Saturated() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.at) < s.interval {
		return s.busy
	}
	s.at = time.Now()
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
	// The bucket that holds the 90th percentile of what ran since the
	// last look; its lower bound is what that goroutine waited at least.
	var seen uint64
	s.busy = false
	for i, c := range h.Counts {
		seen += c - s.counts[i]
		if total > 0 && 10*seen >= 9*total {
			s.busy = h.Buckets[i] >= s.threshold.Seconds()
			break
		}
	}
	copy(s.counts, h.Counts)
	return s.busy
}
