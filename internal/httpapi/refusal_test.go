package httpapi_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// A request refused before its body is read (no token, a bad one) is
// answered at once and its connection closed, whichever server answers
// it: not held until --read-timeout (30 s) by a body sent slowly, or
// never sent. net/http, which serves chunked bodies and heads past 4 KiB,
// would read the rest of the body first (a Content-Length) or after (a
// chunked one).
func TestRefusalDoesNotWaitForTheBodyOnEitherServer(t *testing.T) {
	e := start(t, options{})
	e.create(`{"id":1,"name":"to delete"}`)
	pad := "X-Pad: " + strings.Repeat("p", 5000) + "\r\n"
	for _, c := range []struct{ name, request string }{
		{"lean, a length", "POST /plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":"},
		{"net/http, a length", "POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer pst_guess\r\n" + pad + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":"},
		{"net/http, chunked", "POST /plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{\"id\":\r\n"},
		{"net/http, the wrong route", "PUT /plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{\"id\":\r\n"},
		// Not a refusal: a route that reads no body answers at once too.
		{"net/http, a delete's body", "DELETE /plants/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.writeToken + "\r\n" + pad + "Content-Length: 100\r\n\r\n{"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			begin := time.Now()
			conn.SetDeadline(begin.Add(10 * time.Second))
			if _, err := io.WriteString(conn, c.request); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("the %d's body: %v", resp.StatusCode, err)
			}
			if strings.HasPrefix(c.request, "DELETE") {
				if resp.StatusCode >= 300 {
					t.Fatalf("the delete: %d %s", resp.StatusCode, body)
				}
			} else {
				if resp.StatusCode < 400 {
					t.Fatalf("status %d, want a refusal", resp.StatusCode)
				}
				// The refusal is still an Error, however early it comes.
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("the %d's Content-Type is %q, want application/json", resp.StatusCode, ct)
				}
				var e errorBody
				if err := json.Unmarshal(body, &e); err != nil {
					t.Errorf("the %d's body %q is no Error: %v", resp.StatusCode, body, err)
				}
				if e.Error != resp.StatusCode || e.Message == "" {
					t.Errorf("the %d's body %s: want error %d and a message", resp.StatusCode, body, resp.StatusCode)
				}
			}
			if took := time.Since(begin); took > 2*time.Second {
				t.Errorf("the %d came after %v", resp.StatusCode, took)
			}
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := br.ReadByte(); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("after the %d the connection stayed open for the rest of the body", resp.StatusCode)
			}
		})
	}
}
