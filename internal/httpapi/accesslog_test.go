package httpapi

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

// The access line httpapi formats itself must be the line slog's JSON
// handler writes for the same request, byte for byte, so that the log
// reads the same whichever path wrote it.
func TestAccessLineMatchesSlog(t *testing.T) {
	start := time.Date(2026, 11, 23, 17, 4, 5, 123456789, time.UTC)
	for _, e := range []accessEntry{
		{start: start, method: "GET", path: "/plants/5", status: 200, duration: 302 * time.Microsecond, bytes: 45,
			info: &requestInfo{id: "abc-1", token: "bench"}, remote: "127.0.0.1:4242"},
		{start: start.Add(time.Hour), method: "P\"OST", path: "/a\nb\\c\x00\x7f\xff\u2028<&>é", status: 429, duration: 0, bytes: 0,
			info: &requestInfo{id: "x", limit: "auth_failures"}, remote: "[::1]:1"},
		{start: start, method: "GET", path: "/", status: 503, duration: 12345678 * time.Microsecond, bytes: 1 << 40,
			info: &requestInfo{id: "y", token: "a\tb"}, remote: ""},
	} {
		var fast, slow bytes.Buffer
		s := &Server{cfg: Config{AccessLog: &fast}}
		s.logRequest(context.Background(), &e)

		// Through slog (the text format's path), the line is timed at
		// the request's start too, not when it is written.
		s = &Server{log: slog.New(slog.NewJSONHandler(&slow, nil))}
		s.logRequest(context.Background(), &e)
		if fast.String() != slow.String() {
			t.Errorf("access lines differ:\n got %s\nwant %s", fast.String(), slow.String())
		}
	}
}

func BenchmarkAccessLine(b *testing.B) {
	s := &Server{cfg: Config{AccessLog: discard{}}}
	e := &accessEntry{start: time.Now(), method: "GET", path: "/plants/12345", status: 200, duration: 302 * time.Microsecond,
		bytes: 45, info: &requestInfo{id: "0123456789abcdef-4bot", token: "bench"}, remote: "127.0.0.1:47684"}
	b.ReportAllocs()
	for b.Loop() {
		s.logRequest(context.Background(), e)
	}
}

func BenchmarkAccessLineSlog(b *testing.B) {
	s := &Server{log: slog.New(slog.NewJSONHandler(discard{}, nil))}
	e := &accessEntry{start: time.Now(), method: "GET", path: "/plants/12345", status: 200, duration: 302 * time.Microsecond,
		bytes: 45, info: &requestInfo{id: "0123456789abcdef-4bot", token: "bench"}, remote: "127.0.0.1:47684"}
	b.ReportAllocs()
	for b.Loop() {
		s.logRequest(context.Background(), e)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// maskTokens masks tokens, and only tokens: a path that holds none is
// logged as sent, a 38-character id that fails the checksum included.
func TestMaskTokens(t *testing.T) {
	if !isPrefix(plantstore.TokenPrefix) {
		t.Fatalf("isPrefix does not know the prefix %q", plantstore.TokenPrefix)
	}
	token := plantstore.NewToken()
	secret := strings.TrimPrefix(token, plantstore.TokenPrefix)
	typo := secret[:len(secret)-1] + "0" // a check digit changed
	if strings.HasSuffix(secret, "0") {
		typo = secret[:len(secret)-1] + "1"
	}
	// Past the checks' budget a secret is kept: the bound on what a long
	// path costs the log.
	long := strings.Repeat("b", 16<<10) + secret
	for _, c := range []struct{ in, want string }{
		{"/plants/42", "/plants/42"},
		{"/plants/pst_", "/plants/pst_"},
		{"/plants/" + token, "/plants/pst_xxxxx"},
		{"/plants/pSt_" + secret + "/x", "/plants/pSt_xxxxx/x"},
		{"/plants/" + secret, "/plants/xxxxx"},
		{"/a/" + secret + "_pst_1", "/a/xxxxx"},
		{"/plants/" + typo, "/plants/" + typo},
		{"/plants/" + secret[1:], "/plants/" + secret[1:]},
		{long, long},
		{"POST", "POST"},
	} {
		if got := maskTokens(c.in); got != c.want {
			t.Errorf("maskTokens(%.60q) = %.60q, want %.60q", c.in, got, c.want)
		}
	}
}
