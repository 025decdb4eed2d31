// Package accept reads the weighted lists of the Accept headers (RFC 9110,
// section 12), for the HTTP API and the documents it serves alike.
package accept

import "strings"

// Quality is the q parameter among a list element's parameters (RFC 9110,
// section 12.4.2): 1 when there is none; ok false, and 0, when it is
// malformed, which each caller weighs its own way.
func Quality(params string) (q float64, ok bool) {
	for param := range strings.SplitSeq(params, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(param), "=")
		if strings.EqualFold(strings.TrimSpace(name), "q") {
			return qvalue(strings.TrimSpace(value))
		}
	}
	return 1, true
}

// qvalue parses a weight as RFC 9110 (section 12.4.2) writes it: 0 or 1,
// with at most three decimals, and none past 1 but zeros. Anything else
// (".5", "0.5000", "NaN", "1e-1") is malformed.
func qvalue(v string) (float64, bool) {
	whole, frac, dotted := strings.Cut(v, ".")
	if whole != "0" && whole != "1" || dotted && len(frac) > 3 {
		return 0, false
	}
	q := float64(whole[0] - '0')
	scale := 0.1
	for _, c := range []byte(frac) {
		if c < '0' || c > '9' || whole == "1" && c != '0' {
			return 0, false
		}
		q += float64(c-'0') * scale
		scale /= 10
	}
	return q, true
}

// Gzip tells whether Accept-Encoding values take gzip (RFC 9110, section
// 12.5.3), and prefer it to no coding at all. gzip's weight is that of
// gzip or x-gzip when either is listed, else that of *; identity's is its
// own when listed, else that of *, else 0: a client that names gzip and
// says nothing of identity gets gzip. gzip goes when its weight is above
// 0 and not below identity's, so "identity;q=1, gzip;q=0.1" is answered
// plain. A q that does not parse counts as 0: the answer goes plain,
// which every client takes.
func Gzip(values []string) bool {
	named, star, identity := -1.0, -1.0, -1.0 // the best q of each; -1: not listed
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding != "gzip" && coding != "x-gzip" && coding != "*" && coding != "identity" {
				continue
			}
			q, ok := Quality(params)
			if !ok {
				q = 0
			}
			switch coding {
			case "*":
				star = max(star, q)
			case "identity":
				identity = max(identity, q)
			default:
				named = max(named, q)
			}
		}
	}
	gzip := star
	if named >= 0 {
		gzip = named
	}
	if identity < 0 {
		identity = max(star, 0)
	}
	return gzip > 0 && gzip >= identity
}
