package redact

import "testing"

func TestReplace(t *testing.T) {
	for _, c := range []struct{ s, secret, want string }{
		{`--addr "SECRETVALUE": want HOST:PORT`, "SECRETVALUE", `--addr "<x>": want HOST:PORT`},
		{"a long secret-secret-secret inside", "secret-secret", "a long <x>-secret inside"},
		// Short: only where it stands apart from letters and digits.
		{`--log-format "xml": want json or text; xmlish`, "xml", `--log-format "<x>": want json or text; xmlish`},
		{"p in postgres, p", "p", "<x> in postgres, <x>"},
		{"nothing here", "", "nothing here"},
	} {
		if got := Replace(c.s, c.secret, "<x>"); got != c.want {
			t.Errorf("Replace(%q, %q) = %q, want %q", c.s, c.secret, got, c.want)
		}
	}
}
