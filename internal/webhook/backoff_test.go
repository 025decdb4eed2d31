package webhook

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// middle makes the jitter factor exactly 1.
func middle() float64 { return 0.5 }

func TestNextFollowsIntervalsThenRepeatsTheLast(t *testing.T) {
	created := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	now := created.Add(time.Minute)
	for attempts, want := range map[int]time.Duration{
		0:   5 * time.Second, // treated as the first failure
		1:   5 * time.Second,
		2:   30 * time.Second,
		3:   2 * time.Minute,
		4:   10 * time.Minute,
		5:   time.Hour,
		6:   time.Hour,
		7:   time.Hour,
		100: time.Hour,
	} {
		// A day's park bound, so that no wait here reaches it.
		long := Schedule{Intervals: DefaultSchedule.Intervals, ParkAfter: 24 * time.Hour}
		next, giveUp := long.Next(attempts, created, now, 0, middle)
		if got := next.Sub(now); got != want || giveUp {
			t.Errorf("Next(%d) = now+%s giveUp=%t, want now+%s", attempts, got, giveUp, want)
		}
	}
}

func TestNextJitterBounds(t *testing.T) {
	s := Schedule{Intervals: []time.Duration{10 * time.Second}, ParkAfter: time.Hour}
	now := time.Unix(1_700_000_000, 0)
	wait := func(jitter func() float64) time.Duration {
		next, _ := s.Next(1, now, now, 0, jitter)
		return next.Sub(now)
	}
	if got := wait(func() float64 { return 0 }); got != 8*time.Second {
		t.Errorf("jitter 0: wait %s, want 8s", got)
	}
	// Just under 1 rounds to 12s at nanosecond precision: the bound is 1.2,
	// give or take a nanosecond.
	if got := wait(func() float64 { return math.Nextafter(1, 0) }); got > 12*time.Second || got < 11*time.Second {
		t.Errorf("jitter just under 1: wait %s, want at most 12s", got)
	}
	for _, bad := range []float64{-3, 7, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got := wait(func() float64 { return bad }); got < 8*time.Second || got > 12*time.Second {
			t.Errorf("jitter %v: wait %s, want within [8s, 12s]", bad, got)
		}
	}

	// The default source: always in [0.8, 1.2] and not always the same.
	seen := map[time.Duration]bool{}
	for range 1000 {
		got := wait(nil)
		if got < 8*time.Second || got > 12*time.Second {
			t.Fatalf("nil jitter: wait %s, want within [8s, 12s]", got)
		}
		seen[got] = true
	}
	if len(seen) < 100 {
		t.Errorf("nil jitter gave only %d distinct waits in 1000", len(seen))
	}
}

func TestNextHonoursRetryAfter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name       string
		attempts   int
		retryAfter time.Duration
		want       time.Duration
	}{
		{"longer than the interval", 1, 10 * time.Minute, 10 * time.Minute},
		{"shorter than the interval", 4, time.Minute, 10 * time.Minute},
		{"capped at an hour", 1, 365 * 24 * time.Hour, time.Hour},
		{"capped, even the largest", 1, math.MaxInt64, time.Hour},
		{"negative ignored", 2, -time.Hour, 30 * time.Second},
	} {
		long := Schedule{Intervals: DefaultSchedule.Intervals, ParkAfter: 24 * time.Hour}
		next, giveUp := long.Next(tc.attempts, now, now, tc.retryAfter, middle)
		if got := next.Sub(now); got != tc.want || giveUp {
			t.Errorf("%s: wait %s giveUp=%t, want %s", tc.name, got, giveUp, tc.want)
		}
	}
}

func TestNextParksAfterParkAfter(t *testing.T) {
	s := Schedule{Intervals: []time.Duration{time.Hour}, ParkAfter: 24 * time.Hour}
	created := time.Unix(1_700_000_000, 0)
	deadline := created.Add(24 * time.Hour)

	next, giveUp := s.Next(23, created, deadline.Add(-time.Hour), 0, middle)
	if !next.Equal(deadline) || giveUp {
		t.Errorf("landing exactly on the deadline: next %s giveUp=%t, want the deadline and no give-up", next, giveUp)
	}
	next, giveUp = s.Next(24, created, deadline.Add(-time.Hour+time.Second), 0, middle)
	if !giveUp {
		t.Errorf("next %s is past the deadline %s but giveUp is false", next, deadline)
	}
	// A Retry-After can push a message past its deadline too.
	if _, giveUp := s.Next(1, created, deadline.Add(-30*time.Minute), 50*time.Minute, func() float64 { return 0 }); !giveUp {
		t.Error("a Retry-After past the deadline did not give up")
	}
}

func TestZeroScheduleUsesDefaults(t *testing.T) {
	created := time.Unix(1_700_000_000, 0)
	for attempts := 1; attempts <= 7; attempts++ {
		a, ga := Schedule{}.Next(attempts, created, created, 0, middle)
		b, gb := DefaultSchedule.Next(attempts, created, created, 0, middle)
		if !a.Equal(b) || ga != gb {
			t.Errorf("attempt %d: zero Schedule %s/%t, default %s/%t", attempts, a, ga, b, gb)
		}
	}
	// The default parks a message minutes after its first failure.
	if _, giveUp := (Schedule{}).Next(3, created, created.Add(9*time.Minute), 0, middle); !giveUp {
		t.Error("a zero Schedule does not park after ten minutes")
	}
	if _, giveUp := (Schedule{}).Next(3, created, created.Add(time.Minute), 0, middle); giveUp {
		t.Error("a zero Schedule parks a message a minute after its first failure")
	}
}

func TestParseIntervals(t *testing.T) {
	got, err := ParseIntervals("5s,30s,2m,10m,1h")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, DefaultSchedule.Intervals) {
		t.Errorf("ParseIntervals = %v, want %v", got, DefaultSchedule.Intervals)
	}
	got, err = ParseIntervals(" 1s , 1m30s ")
	if err != nil || !slices.Equal(got, []time.Duration{time.Second, 90 * time.Second}) {
		t.Errorf("with spaces: %v, %v", got, err)
	}

	for _, tc := range []struct{ in, wantInErr string }{
		{"", "empty"},
		{"  ", "empty"},
		{"5s,,1m", "interval 2 is empty"},
		{"5s,", "interval 2 is empty"},
		{"0s", "positive"},
		{"5s,-1m", "interval 2 \"-1m\" must be positive"},
		{"5", "not a duration"},
		{"five seconds", "not a duration"},
		{"1d", "not a duration"},
	} {
		_, err := ParseIntervals(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
			t.Errorf("ParseIntervals(%q) = %v, want an error mentioning %q", tc.in, err, tc.wantInErr)
		}
	}
}
