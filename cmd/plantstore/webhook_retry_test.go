package main

import (
	"strings"
	"testing"
)

// webhook retry says what it wants when given too little or too much,
// and retries nothing when a delivery given is not parked.
func TestWebhookRetryRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mustToken(t, dir, "--name", "me") // makes the store
	for _, tc := range []struct {
		args []string
		exit int
		want string
	}{
		{nil, 2, "give the parked delivery IDs"},
		{[]string{"1", "--subscriber", "2"}, 2, "not both"},
		{[]string{"x"}, 2, `"x" is not a delivery ID`},
		{[]string{"999"}, 1, "none was retried"},
		{[]string{"--subscriber", "7"}, 1, "no active webhook subscriber 7"},
	} {
		r := cli(t, dir, nil, append([]string{"webhook", "retry"}, tc.args...)...)
		if r.exit != tc.exit || !strings.Contains(r.stderr, tc.want) || r.stdout != "" || strings.Contains(r.stderr, "the others") {
			t.Errorf("webhook retry %q: exit %d, %q; want %d and %q", tc.args, r.exit, r.stderr, tc.exit, tc.want)
		}
	}
}
