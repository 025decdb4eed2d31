package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A refusal from something other than plantstore (a proxy, a TLS server
// asked in plain HTTP) has no Error body: a short plain-text message is
// shown as sent, anything else as the status's text.
func TestErrorFromOtherServers(t *testing.T) {
	cases := []struct {
		name, contentType, body string
		status                  int
		want                    string
	}{
		{"plantstore's Error", "application/json", `{"error":404,"message":"plant 9 not found"}`, 404, "plant 9 not found"},
		{"Go's TLS server asked in plain HTTP", "text/plain; charset=utf-8", "Client sent an HTTP request to an HTTPS server.\n", 400, "Client sent an HTTP request to an HTTPS server."},
		{"plain text over lines", "text/plain", "upstream\nconnect error\n", 503, "upstream connect error"},
		{"a proxy's page", "text/html", "<html><body><h1>502 Bad Gateway</h1></body></html>", 502, "Bad Gateway"},
		{"JSON of another shape", "application/json", `{"detail":"nope"}`, 403, "Forbidden"},
		{"no body", "", "", 500, "Internal Server Error"},
		{"too long to be a message", "text/plain", string(make([]byte, 400)), 500, "Internal Server Error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c, err := New(srv.URL, "t")
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Get(context.Background(), 9)
			e, ok := err.(*Error)
			if !ok {
				t.Fatalf("Get: %v (%T), want an *Error", err, err)
			}
			if e.StatusCode != tc.status || e.Message != tc.want {
				t.Errorf("got %d %q, want %d %q", e.StatusCode, e.Message, tc.status, tc.want)
			}
		})
	}
}

// An answer cut short says which request it was and keeps its cause
// (errors.Is sees io.ErrUnexpectedEOF, which the retries act on); one
// larger than any of the API's is not read whole: an error body past
// 64 KiB is the status's text, a 2xx past 8 MiB an error.
func TestAnswersCutShortOrTooLarge(t *testing.T) {
	var written atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		switch r.URL.Path {
		case "/plants/1": // a Content-Length the body never reaches
			w.Header().Set("Content-Length", "100")
			w.Write([]byte(`{"name":"a"`))
			return
		case "/plants/2":
			w.WriteHeader(http.StatusInternalServerError)
		}
		for range 300 << 20 / len(chunk) { // 300 MiB, or until the client stops reading
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "t", WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = c.Get(ctx, 1)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "GET /plants/1: reading the answer") {
		t.Errorf("an answer cut short: %v", err)
	}
	for id, want := range map[int64]string{2: "Internal Server Error", 3: "larger than 8 MiB"} {
		written.Store(0)
		_, err := c.Get(ctx, id)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("plant %d, a body of 300 MiB: %v, want it to say %q", id, err, want)
		}
		// What the server got written before the client closed: what
		// the client read, and the sockets' buffers.
		if n := written.Load(); n > 32<<20 {
			t.Errorf("plant %d: the server wrote %d MiB before the client stopped reading", id, n>>20)
		}
	}
}
