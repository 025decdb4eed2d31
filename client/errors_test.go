package client

import (
	"context"
	"net/http"
	"net/http/httptest"
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
