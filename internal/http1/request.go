package http1

import (
	"bytes"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// parseRequest reads the head of a request (through its empty line) into
// an *http.Request without a body, and reports whether the fast path takes
// it. It takes only what it is sure of; anything else, valid or not, is
// net/http's to answer:
//
//   - the request line "GET|POST|PUT|DELETE SP target SP HTTP/1.1", the
//     target a path of letters, digits and "-._~/" (no dot segment, no
//     empty one) with an optional query
//     of RFC 3986 query characters (no fragment, no escapes in the path),
//     which take accepts;
//   - header lines "Name: value" ended by CRLF, the name a token, the
//     value without control characters (no obsolete folding, no bare CR
//     or LF);
//   - exactly one Host, of host characters;
//   - at most one Content-Length, of digits; no Transfer-Encoding, Expect
//     or Upgrade; a Connection of "close" or "keep-alive" only.
//
// The request is built in parsed, which the connection reuses for its next
// request: its header map, URL and values too (about 1 KB and three
// allocations a request). The head's string is new each time, since a
// handler may keep a value.
func parseRequest(raw []byte, take func(method, path string) bool, parsed *parsedRequest) (*http.Request, bool) {
	if !bytes.HasSuffix(raw, crlfcrlf) {
		return nil, false // no head, or one with bare LFs
	}
	// One string for the whole head: the handler may keep any header's
	// value past this request (say, a token in a cache), and the buffer
	// it was read into serves the next one.
	head := string(raw)
	line, _, _ := strings.Cut(head, "\r\n")
	method, rest, ok := strings.Cut(line, " ")
	if !ok {
		return nil, false
	}
	switch method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete:
	default:
		return nil, false
	}
	target, proto, ok := strings.Cut(rest, " ")
	if !ok || proto != "HTTP/1.1" || target == "" || target[0] != '/' {
		return nil, false
	}
	path, query, hasQuery := strings.Cut(target, "?")
	if !allIn(path, &pathChars) || strings.Contains(path, "/.") || strings.Contains(path, "//") || !allIn(query, &queryChars) || !take(method, path) {
		return nil, false
	}

	fields := head[len(line)+2 : len(head)-2] // each ends with CRLF
	n := strings.Count(fields, "\r\n")
	header := parsed.header
	if header == nil || len(header) > maxKeptFields {
		// A map grown by a large head is not kept: cleared, it would
		// keep its size (and its clearing cost) for the connection's life.
		header = make(http.Header, n)
		parsed.header = header
	} else {
		clear(header)
	}
	values := parsed.values[:0]
	if n > len(parsed.values) {
		values = make([]string, 0, n)
	}
	values = values[:n]
	var host string
	var hosts, lengths int
	contentLength := int64(0)
	closeAfter := false
	for i := 0; fields != ""; i++ {
		field, more, _ := strings.Cut(fields, "\r\n")
		fields = more
		name, value, ok := strings.Cut(field, ":")
		if !ok || name == "" || !allIn(name, &tokenChars) {
			return nil, false // includes obsolete folding: a line beginning with a space
		}
		value = strings.Trim(value, " \t")
		if !validValue(value) {
			return nil, false
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		switch key {
		case "Host":
			hosts++
			host = value
			continue // net/http keeps it in Request.Host only
		case "Content-Length":
			lengths++
			length, ok := parseLength(value)
			if !ok || lengths > 1 {
				return nil, false
			}
			contentLength = length
		case "Transfer-Encoding", "Expect", "Upgrade":
			return nil, false
		case "Connection":
			for token := range strings.SplitSeq(value, ",") {
				switch token = strings.TrimSpace(token); {
				case strings.EqualFold(token, "close"):
					closeAfter = true
				case strings.EqualFold(token, "keep-alive"):
				default:
					return nil, false
				}
			}
		}
		values[i] = value
		if header[key] == nil {
			header[key] = values[i : i+1 : i+1]
		} else {
			header[key] = append(header[key], value)
		}
	}
	if hosts != 1 || host == "" || !allIn(host, &hostChars) {
		return nil, false
	}
	parsed.url = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	parsed.req = http.Request{
		Method:        method,
		URL:           &parsed.url,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		ContentLength: contentLength,
		Close:         closeAfter,
		Host:          host,
		RequestURI:    target,
	}
	return &parsed.req, true
}

// maxKeptFields is the most distinct fields whose header map a connection
// keeps for its next request.
const maxKeptFields = 16

// parsedRequest holds a request parseRequest builds, with its URL, its
// header map and the values of up to eight fields, for a connection to
// reuse request after request.
type parsedRequest struct {
	req    http.Request
	url    url.URL
	header http.Header
	values [8]string
}

// parseLength parses a Content-Length of 1 to 18 digits.
func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

// validValue says whether a field value has no control character but tab.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

type charSet [256]bool

func allIn(s string, set *charSet) bool {
	for i := 0; i < len(s); i++ {
		if !set[s[i]] {
			return false
		}
	}
	return true
}

func newCharSet(extra string) charSet {
	var set charSet
	for c := '0'; c <= '9'; c++ {
		set[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		set[c] = true
		set[c-'a'+'A'] = true
	}
	for i := 0; i < len(extra); i++ {
		set[extra[i]] = true
	}
	return set
}

var (
	// RFC 9110's token characters, which header names are made of.
	tokenChars = newCharSet("!#$%&'*+-.^_`|~")
	// The path's unreserved characters and "/": no escapes, so the path
	// is its own decoding.
	pathChars = newCharSet("-._~/")
	// RFC 3986's query characters: pchar, "/" and "?".
	queryChars = newCharSet("-._~!$&'()*+,;=:@/?%")
	// A host name, an IPv4 or bracketed IPv6 address, and a port.
	hostChars = newCharSet("-._:[]")
)
