package main

import (
	"regexp"
	"strings"
	"testing"
)

// webhook add warns, on stderr and without refusing, when the subscriber's
// host is an address serve refuses by default, and names the flag.
func TestWebhookAddWarnsOnPrivateAddress(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mustToken(t, dir, "--name", "me") // makes the store: webhook add makes none
	for _, tc := range []struct{ url, want string }{
		{"http://127.0.0.1:9000/hook", "--allow-private-webhooks"},
		{"http://10.1.2.3/hook", "--allow-private-webhooks"},
		{"http://[fd00::1]/hook", "--allow-private-webhooks"},
		{"http://localhost:9000/hook", "localhost resolves to "},
		{"http://169.254.169.254/latest/meta-data", "--allow-metadata-webhooks"},
		{"https://93.184.215.14/hook", ""}, // public: no warning
	} {
		res := cli(t, dir, nil, "webhook", "add", tc.url)
		if res.exit != 0 || !regexp.MustCompile(`^whsec_\S+\n$`).MatchString(res.stdout) {
			t.Errorf("webhook add %s: exit %d, stdout %q; want it added, the secret alone on stdout", tc.url, res.exit, res.stdout)
			continue
		}
		warned := strings.Contains(res.stderr, "warning:")
		switch {
		case tc.want == "" && warned:
			t.Errorf("webhook add %s warned: %q", tc.url, res.stderr)
		case tc.want != "" && (!warned || !strings.Contains(res.stderr, tc.want) || !strings.Contains(res.stderr, "refused")):
			t.Errorf("webhook add %s: stderr %q; want a warning that deliveries are refused, with %q", tc.url, res.stderr, tc.want)
		}
		if strings.Contains(res.stderr, "/hook") || strings.Contains(res.stderr, "meta-data") {
			t.Errorf("the warning shows the URL's path: %q", res.stderr)
		}
	}
}
