package webhook

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// maxRetryAfter caps how long a subscriber's Retry-After can delay the next
// attempt, so a receiver cannot park deliveries for a year.
const maxRetryAfter = time.Hour

// Schedule is when failed deliveries are tried again. Intervals[i] is the
// wait after the (i+1)th failure; the last one repeats. ParkAfter bounds the
// effort, counted from the message's first failed attempt: then the
// message is parked, and the plant's later messages go on, rather than
// wait behind it. (Counted from the failure, not from the message's
// creation, so that a backlog that waited its turn is not parked at its
// first failure.)
type Schedule struct {
	Intervals []time.Duration
	ParkAfter time.Duration
}

// DefaultSchedule retries quickly at first, for a blip, then parks a
// message once its next retry would fall more than ten minutes after its
// first failure (at its fourth failure, some 2.5 minutes in), so that one
// event a receiver refuses holds back its plant's later events for
// minutes, not a day. A Schedule with no Intervals or no ParkAfter takes
// them from here. Treat it as read-only.
var DefaultSchedule = Schedule{
	Intervals: []time.Duration{
		5 * time.Second,
		30 * time.Second,
		2 * time.Minute,
		10 * time.Minute,
		time.Hour,
	},
	ParkAfter: 10 * time.Minute,
}

// ParseIntervals reads retry intervals from a flag value such as
// "5s,30s,2m,10m,1h" (Go durations, comma-separated). Each must be positive:
// a zero wait would hammer a failing subscriber.
func ParseIntervals(s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("retry intervals: empty; want a list such as 5s,30s,2m,10m,1h")
	}
	parts := strings.Split(s, ",")
	intervals := make([]time.Duration, 0, len(parts))
	for i, part := range parts {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("retry intervals: interval %d is empty", i+1)
		}
		d, err := time.ParseDuration(part)
		if err != nil {
			return nil, fmt.Errorf("retry intervals: interval %d %q is not a duration such as 30s or 2m", i+1, part)
		}
		if d <= 0 {
			return nil, fmt.Errorf("retry intervals: interval %d %q must be positive", i+1, part)
		}
		intervals = append(intervals, d)
	}
	return intervals, nil
}

// Next says when to try a message again after its attempts-th failure
// (1 after the first). The wait is Intervals[attempts-1], or the last
// interval once they run out, scaled by a random factor between 0.8 and
// 1.2 so that messages that failed together do not retry together. jitter
// returns a number in [0, 1) that picks the factor linearly (0 is 0.8, 0.5
// is exactly 1); nil means math/rand/v2's Float64.
// retryAfter, the subscriber's own request (Result.RetryAfter), is a lower
// bound on the wait, itself capped at one hour. giveUp is true when the
// schedule's own wait (retryAfter aside) ends later than
// firstFailed+ParkAfter: the dispatcher should park the message instead of
// scheduling it.
func (s Schedule) Next(attempts int, firstFailed, now time.Time, retryAfter time.Duration, jitter func() float64) (next time.Time, giveUp bool) {
	intervals, maxAge := s.Intervals, s.ParkAfter
	if len(intervals) == 0 {
		intervals = DefaultSchedule.Intervals
	}
	if maxAge <= 0 {
		maxAge = DefaultSchedule.ParkAfter
	}
	if jitter == nil {
		jitter = rand.Float64
	}
	i := min(max(attempts, 1)-1, len(intervals)-1)
	u := jitter()
	if !(u >= 0) { // also catches NaN: a bad jitter func cannot leave 0.8 to 1.2
		u = 0
	}
	u = min(u, 1)
	next = now.Add(time.Duration(float64(intervals[i]) * (0.8 + 0.4*u)))
	// The schedule's own wait decides parking; the subscriber's wait only
	// delays the attempt, even past ParkAfter: a receiver that asks to be
	// called back in 15 minutes (planned maintenance) is, once, rather
	// than parked at its first answer.
	giveUp = next.After(firstFailed.Add(maxAge))
	if asked := now.Add(min(retryAfter, maxRetryAfter)); asked.After(next) {
		next = asked
	}
	return next, giveUp
}
