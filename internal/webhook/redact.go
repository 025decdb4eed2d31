package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
)

// RedactURL is a subscriber's URL as logs and terminals show it: its scheme
// and host, then, for whatever follows (path and query), "/…#" and the
// first 8 hex digits of its SHA-256, as in https://hooks.slack.com/…#1a2b3c4d.
// Slack- and Discord-style URLs carry their secret in the path, others in
// the query, and logs and terminal output are kept and copied far more
// widely than the store. The hash tells two subscribers on one host apart
// and matches a log line to "webhook list" without showing the rest. It is
// not a secret: a low-entropy path (a four-digit PIN) can be found again
// by trying every value.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "(a URL that does not parse)"
	}
	rest := u.EscapedPath()
	if u.RawQuery != "" || u.ForceQuery {
		rest += "?" + u.RawQuery
	}
	if u.Fragment != "" {
		rest += "#" + u.EscapedFragment()
	}
	base := u.Scheme + "://" + u.Host
	if rest == "" || rest == "/" {
		return base + rest
	}
	sum := sha256.Sum256([]byte(rest))
	return base + "/…#" + hex.EncodeToString(sum[:4])
}
