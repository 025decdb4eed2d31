package webhook_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

// A subscriber's failed attempts show as its last error, with the time of
// the newest, while it fails; the first delivery after clears it.
func TestLastErrorUntilDelivered(t *testing.T) {
	f := start(t, fast)
	var up atomic.Bool
	_, sub := f.subscribe(func(int, delivery) (int, http.Header) {
		if up.Load() {
			return http.StatusOK, nil
		}
		return http.StatusServiceUnavailable, nil
	})
	before := time.Now()
	f.create(1)
	eventually(t, "a failed attempt recorded", func() bool { return f.subscriber(sub.ID).LastErrorAt != nil })
	s := f.subscriber(sub.ID)
	if s.State() != plantstore.SubscriberFailing || s.LastError != "503 Service Unavailable" || s.LastErrorAt.Before(before.Add(-time.Millisecond)) || s.LastErrorAt.After(time.Now()) {
		t.Errorf("while failing: %+v, state %s", s, s.State())
	}
	first := *s.LastErrorAt
	eventually(t, "a later attempt's time", func() bool { return f.subscriber(sub.ID).LastErrorAt.After(first) })

	up.Store(true)
	eventually(t, "the delivery", func() bool { return f.subscriber(sub.ID).Delivered == 1 })
	if s := f.subscriber(sub.ID); s.State() != plantstore.SubscriberActive || s.LastError != "" || s.LastErrorAt != nil {
		t.Errorf("after the delivery: %+v, state %s", s, s.State())
	}
}
