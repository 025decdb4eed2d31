// Package redact takes secrets out of texts meant for people: error
// messages and logs.
package redact

import "strings"

// shortSecret is the length under which a secret is taken out of a text
// only where it stands apart from letters and digits: a secret of one to
// a few characters replaced wherever it occurs would garble every message
// ("p" in "postgres").
const shortSecret = 8

// Replace returns s with each occurrence of secret replaced by mask; one
// shorter than shortSecret only where it stands apart.
func Replace(s, secret, mask string) string {
	if secret == "" {
		return s
	}
	if len(secret) >= shortSecret {
		return strings.ReplaceAll(s, secret, mask)
	}
	var b strings.Builder
	for {
		i := strings.Index(s, secret)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(secret)
		apart := (i == 0 || !isAlnum(s[i-1])) && (end == len(s) || !isAlnum(s[end]))
		b.WriteString(s[:i])
		if apart {
			b.WriteString(mask)
		} else {
			b.WriteString(secret)
		}
		s = s[end:]
	}
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
