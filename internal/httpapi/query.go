package httpapi

import (
	"fmt"
	"net/url"
	"strings"
)

// parseQuery reads a query string as url.ParseQuery does, except that a
// semicolon is a character like any other: RFC 3986 allows it in a query,
// and a tag may hold one ("?tag=a;b" is the tag "a;b"). Go's ParseQuery
// refuses it, as a separator some old servers took, and with it the whole
// query. Only "&" separates parameters here.
func parseQuery(raw string) (url.Values, error) {
	q := url.Values{}
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		key, value, _ := strings.Cut(part, "=")
		k, err := url.QueryUnescape(key)
		if err != nil {
			return q, fmt.Errorf("%q: %w", truncate(key, 40), err)
		}
		v, err := url.QueryUnescape(value)
		if err != nil {
			return q, fmt.Errorf("%s: %w", truncate(k, 40), err)
		}
		q[k] = append(q[k], v)
	}
	return q, nil
}
