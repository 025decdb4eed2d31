package http1

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkServe compares the fast path with net/http serving the same
// small JSON answer over loopback, one kept-alive connection, request
// after request: the server's cost per request and the client's, which
// is the same on both. Run at -cpu 1 to see one core:
//
//	go test -run '^$' -bench Serve -cpu 1,2 ./internal/http1/
func BenchmarkServe(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer x" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "private, no-cache")
		h.Set("Etag", `"abcdefghijklmnopqrstuv"`)
		h.Set("X-Request-Id", "ps-0123456789abcdef-1")
		io.WriteString(w, `{"id":1,"name":"Monstera deliciosa","tag":"tropical"}`)
	})
	for _, fast := range []bool{false, true} {
		name := "net/http"
		if fast {
			name = "fast"
		}
		b.Run(name, func(b *testing.B) {
			addr, _ := listen(b, h, fast, Limits{})
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			req := []byte("GET /plants/1 HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer x\r\nUser-Agent: bench\r\n\r\n")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, res.Body); err != nil || res.StatusCode != http.StatusOK {
					b.Fatal(fmt.Errorf("status %d, %v", res.StatusCode, err))
				}
				res.Body.Close()
			}
		})
	}
}
