package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echo answers with what it was asked, so two servers' answers differ
// wherever their requests did. It reads the body only when asked to
// (X-Read: no leaves it unread) and notes which server called it.
func echo(fast *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(*response); ok && fast != nil {
			fast.Add(1)
		}
		var body []byte
		if r.Header.Get("X-Read") != "no" {
			var err error
			if body, err = io.ReadAll(r.Body); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, "body: %v", err)
				return
			}
		}
		names := slices.Sorted(func(yield func(string) bool) {
			for name := range r.Header {
				if !yield(name) {
					return
				}
			}
		})
		if r.Header.Get("X-Status") == "204" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.Header.Get("X-Type") != "" {
			w.Header().Set("Content-Type", r.Header.Get("X-Type"))
		}
		w.Header().Set("X-Echo", "a\r\nb") // a line break net/http sends as a space
		fmt.Fprintf(w, "%s %s path=%q query=%q proto=%s host=%q length=%d close=%v\n",
			r.Method, r.RequestURI, r.URL.Path, r.URL.RawQuery, r.Proto, r.Host, r.ContentLength, r.Close)
		for _, name := range names {
			fmt.Fprintf(w, "%s=%q\n", name, r.Header[name])
		}
		fmt.Fprintf(w, "body=%q\n", body)
	})
}

func takePlants(method, path string) bool {
	return path == "/plants" || strings.HasPrefix(path, "/plants/")
}

// listen starts a server on loopback and returns its address: net/http
// alone when fast is false, else the fast path with net/http serving
// what it hands off.
func listen(t testing.TB, h http.Handler, fast bool, limits Limits) (string, *Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	std := &http.Server{Handler: h, ReadHeaderTimeout: limits.ReadHeaderTimeout, ReadTimeout: limits.ReadTimeout,
		WriteTimeout: limits.WriteTimeout, IdleTimeout: limits.IdleTimeout, ErrorLog: nil}
	if !fast {
		go std.Serve(ln)
		t.Cleanup(func() { std.Close() })
		return ln.Addr().String(), nil
	}
	s := New(h, takePlants, limits, nil)
	go std.Serve(s.Handoffs())
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		std.Close()
	})
	return ln.Addr().String(), s
}

// chunkingAfter is the size of net/http's response buffer: a longer body
// with no length set by the handler is sent chunked.
const chunkingAfter = 2048

// exchange sends raw on a new connection, half-closes it, and returns the
// answers read until the server closed it, each as text without its Date
// (and without the length of a body over chunkingAfter).
func exchange(t *testing.T, addr, raw string) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	all, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading the answers: %v", err)
	}
	var answers []string
	br := bufio.NewReader(bytes.NewReader(all))
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			if br.Buffered() > 0 {
				rest, _ := io.ReadAll(br)
				answers = append(answers, fmt.Sprintf("unparsed: %q", rest))
			}
			return answers
		}
		body, _ := io.ReadAll(res.Body)
		res.Header.Del("Date")
		if len(body) > chunkingAfter {
			// The one framing that differs by design: net/http chunks
			// a body longer than its buffer when the handler set no
			// length; the fast path always sends the length. Either way
			// the client reads the same body, which is compared.
			res.Header.Del("Content-Length")
			res.ContentLength = -1
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s\n", res.Status)
		res.Header.Write(&b)
		fmt.Fprintf(&b, "length=%d close=%v\n%s", res.ContentLength, res.Close, body)
		answers = append(answers, b.String())
	}
}

// The requests the fast path takes are answered as net/http answers them,
// byte for byte but the Date; those it does not take reach net/http, with
// every byte read put back. Each case's name says which side serves it.
func TestAnswersAsNetHTTP(t *testing.T) {
	cases := answerCases
	var taken atomic.Int64
	stdAddr, _ := listen(t, echo(nil), false, Limits{})
	fastAddr, _ := listen(t, echo(&taken), true, Limits{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := exchange(t, stdAddr, tc.raw)
			before := taken.Load()
			got := exchange(t, fastAddr, tc.raw)
			if tc.saysClose && len(got) > 0 {
				got[0] = strings.Replace(strings.Replace(got[0], "Connection: close\r\n", "", 1), "close=true", "close=false", 1)
			}
			if !slices.Equal(got, want) {
				t.Errorf("answers differ\nnet/http:\n%s\nfast path:\n%s", strings.Join(want, "\n----\n"), strings.Join(got, "\n----\n"))
			}
			if n := taken.Load() - before; n != int64(tc.taken) {
				t.Errorf("the fast path served %d requests, want %d", n, tc.taken)
			}
			if len(want) == 0 {
				t.Errorf("net/http answered nothing: the case tests nothing")
			}
		})
	}
}

type answerCase struct {
	name  string
	raw   string
	taken int // requests the fast path must have served
	// saysClose: the fast path answers "Connection: close" where
	// net/http closes without saying so (the body was cut short).
	saysClose bool
}

const h = "Host: example.com\r\n"

// answerCases are the requests TestAnswersAsNetHTTP sends, and the fuzz
// target's seeds.
var answerCases = []answerCase{
	{"fast: a plain GET", "GET /plants/7 HTTP/1.1\r\n" + h + "Authorization: Bearer x\r\n\r\n", 1, false},
	{"fast: a query", "GET /plants?limit=5&after=10&tag=a%20b HTTP/1.1\r\n" + h + "\r\n", 1, false},
	{"fast: an empty query", "GET /plants? HTTP/1.1\r\n" + h + "\r\n", 1, false},
	{"fast: a POST with a body", "POST /plants HTTP/1.1\r\n" + h + "Content-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"id\":1,\"n\":2}", 1, false},
	{"fast: PUT and DELETE", "PUT /plants/1 HTTP/1.1\r\n" + h + "Content-Length: 2\r\n\r\n{}DELETE /plants/1 HTTP/1.1\r\n" + h + "\r\n", 2, false},
	{"fast: pipelined, keep-alive", strings.Repeat("GET /plants/1 HTTP/1.1\r\n"+h+"\r\n", 5), 5, false},
	// The connection reuses its request: none of an earlier one's fields,
	// query or length may show in a later one.
	{"fast: pipelined requests keep their own fields", "POST /plants?q=1 HTTP/1.1\r\n" + h + "X-A: 1\r\nX-B: 2\r\nX-C: 3\r\nX-D: 4\r\nX-E: 5\r\nX-F: 6\r\nX-G: 7\r\nX-H: 8\r\nX-I: 9\r\nContent-Length: 2\r\n\r\n{}" +
		"GET /plants/2 HTTP/1.1\r\n" + h + "X-B: other\r\n\r\nGET /plants/3 HTTP/1.1\r\n" + h + "\r\n", 3, false},
	{"fast: pipelined requests of few fields each", "GET /plants/1?a=1 HTTP/1.1\r\n" + h + "X-A: 1\r\nX-B: 2\r\nX-C: 3\r\n\r\nGET /plants/2 HTTP/1.1\r\n" + h + "X-D: 4\r\n\r\n", 2, false},
	{"fast: Connection: close ends the connection", "GET /plants/1 HTTP/1.1\r\n" + h + "Connection: close\r\n\r\nGET /plants/2 HTTP/1.1\r\n" + h + "\r\n", 1, false},
	{"fast: Connection: keep-alive", "GET /plants/1 HTTP/1.1\r\n" + h + "Connection: Keep-Alive\r\n\r\n", 1, false},
	{"fast: lower-case and repeated fields", "GET /plants/1 HTTP/1.1\r\nhost: example.com\r\nx-a: 1\r\nX-A: 2\r\naccept-encoding:gzip \r\n\r\n", 1, false},
	{"fast: obs-text in a value", "GET /plants/1 HTTP/1.1\r\n" + h + "X-Name: caf\xc3\xa9\r\n\r\n", 1, false},
	{"fast: an unread body is dropped", "POST /plants HTTP/1.1\r\n" + h + "X-Read: no\r\nContent-Length: 5\r\n\r\nhelloGET /plants/2 HTTP/1.1\r\n" + h + "\r\n", 2, false},
	{"fast: a body cut short", "POST /plants HTTP/1.1\r\n" + h + "Content-Length: 50\r\n\r\nshort", 1, true},
	{"fast: no content type, sniffed", "GET /plants/1 HTTP/1.1\r\n" + h + "\r\n", 1, false},
	{"fast: a set content type", "GET /plants/1 HTTP/1.1\r\n" + h + "X-Type: application/json\r\n\r\n", 1, false},
	{"fast: 204 has no length", "DELETE /plants/1 HTTP/1.1\r\n" + h + "X-Status: 204\r\n\r\n", 1, false},
	{"fast: a GET with a body", "GET /plants/1 HTTP/1.1\r\n" + h + "Content-Length: 3\r\n\r\nabc", 1, false},
	{"fast: an answer longer than net/http's buffer", "POST /plants HTTP/1.1\r\n" + h + "X-Long: " + strings.Repeat("l", 2100) + "\r\nContent-Length: 2\r\n\r\n{}", 1, false},
	{"fast: leading zeros in the length", "POST /plants HTTP/1.1\r\n" + h + "Content-Length: 002\r\n\r\nab", 1, false},
	{"fast, then net/http on the same connection", "GET /plants/1 HTTP/1.1\r\n" + h + "\r\nGET /other HTTP/1.1\r\n" + h + "\r\nGET /plants/3 HTTP/1.1\r\n" + h + "\r\n", 1, false},

	{"fast: CRLF after a POST's body is dropped", "POST /plants HTTP/1.1\r\n" + h + "Content-Length: 2\r\n\r\n{}\r\nGET /plants/1 HTTP/1.1\r\n" + h + "\r\n", 2, false},
	{"fast, then net/http after a POST's CRLF", "POST /plants HTTP/1.1\r\n" + h + "Content-Length: 2\r\n\r\n{}\r\n\nGET /other HTTP/1.1\r\n" + h + "\r\n", 1, false},
	{"net/http: CRLF after a GET is not dropped", "GET /plants/1 HTTP/1.1\r\n" + h + "\r\n\r\nGET /plants/2 HTTP/1.1\r\n" + h + "\r\n", 1, false},
	{"net/http: another path", "GET /other HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: HEAD", "HEAD /plants/1 HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: OPTIONS", "OPTIONS /plants HTTP/1.1\r\n" + h + "\r\n", 0, false},
	// The asterisk form: never taken, whatever the method, so OPTIONS *
	// gets one answer whichever server reads it first (httpapi's
	// TestOptionsAsterisk has that answer).
	{"net/http: OPTIONS *", "OPTIONS * HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: GET *", "GET * HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: OPTIONS * then a plain GET", "OPTIONS * HTTP/1.1\r\n" + h + "\r\nGET /plants/1 HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: PATCH", "PATCH /plants/1 HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: HTTP/1.0", "GET /plants/1 HTTP/1.0\r\n" + h + "\r\n", 0, false},
	{"net/http: absolute form", "GET http://example.com/plants/1 HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: an escaped path", "GET /plants/%31 HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: dot segments", "GET /plants/../plants/1 HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: a fragment", "GET /plants/1#x HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: chunked", "POST /plants HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 0, false},
	{"net/http: chunked and a length (smuggling)", "POST /plants HTTP/1.1\r\n" + h + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /plants/9 HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: two lengths", "POST /plants HTTP/1.1\r\n" + h + "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 0, false},
	{"net/http: two different lengths", "POST /plants HTTP/1.1\r\n" + h + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 0, false},
	{"net/http: a signed length", "POST /plants HTTP/1.1\r\n" + h + "Content-Length: +3\r\n\r\nabc", 0, false},
	{"net/http: a length in hex", "POST /plants HTTP/1.1\r\n" + h + "Content-Length: 0x3\r\n\r\nabc", 0, false},
	{"net/http: Expect", "POST /plants HTTP/1.1\r\n" + h + "Expect: 100-continue\r\nContent-Length: 2\r\n\r\n{}", 0, false},
	{"net/http: an unknown expectation", "POST /plants HTTP/1.1\r\n" + h + "Expect: magic\r\nContent-Length: 2\r\n\r\n{}", 0, false},
	{"net/http: Upgrade", "GET /plants/1 HTTP/1.1\r\n" + h + "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n", 0, false},
	{"net/http: obsolete folding", "GET /plants/1 HTTP/1.1\r\n" + h + "X-A: 1\r\n  2\r\n\r\n", 0, false},
	{"net/http: a space before the colon", "GET /plants/1 HTTP/1.1\r\n" + h + "X-A : 1\r\n\r\n", 0, false},
	{"net/http: bare LF", "GET /plants/1 HTTP/1.1\n" + h + "\n", 0, false},
	{"net/http: bare LF in a field", "GET /plants/1 HTTP/1.1\r\n" + h + "X-A: 1\nX-B: 2\r\n\r\n", 0, false},
	{"net/http: a control character", "GET /plants/1 HTTP/1.1\r\n" + h + "X-A: a\x01b\r\n\r\n", 0, false},
	{"net/http: no Host", "GET /plants/1 HTTP/1.1\r\n\r\n", 0, false},
	{"net/http: two Hosts", "GET /plants/1 HTTP/1.1\r\n" + h + h + "\r\n", 0, false},
	{"net/http: an odd Host", "GET /plants/1 HTTP/1.1\r\nHost: a b\r\n\r\n", 0, false},
	{"net/http: a head over 4 KiB", "GET /plants/1 HTTP/1.1\r\n" + h + "X-Big: " + strings.Repeat("b", 5000) + "\r\n\r\n", 0, false},
	{"net/http: a head cut short", "GET /plants/1 HTTP/1.1\r\n" + h, 0, false},
	{"net/http: a head cut short after a request", "GET /plants/1 HTTP/1.1\r\n" + h + "\r\nGET /plants/2 HTTP/1.1\r\n", 1, false},
	// (Not a TLS handshake record, which the fast path answers itself:
	// TestTLSClientAnsweredAtOnce.)
	{"net/http: garbage", "\x15\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 0, false},
	{"net/http: a lower-case method", "get /plants/1 HTTP/1.1\r\n" + h + "\r\n", 0, false},
	{"net/http: an unknown Connection option", "GET /plants/1 HTTP/1.1\r\n" + h + "Connection: X-Foo\r\n\r\n", 0, false},
}

// normalized drops what may differ between the two servers' answers to
// the same bytes: whether a connection about to close says so.
func normalized(answers []string) []string {
	out := make([]string, len(answers))
	for i, a := range answers {
		a = strings.Replace(a, "Connection: close\r\n", "", 1)
		out[i] = strings.Replace(a, "close=true", "close=false", 1)
	}
	return out
}

// FuzzAnswersAsNetHTTP sends any bytes to net/http and to the fast path:
// their answers must be the same (see normalized).
func FuzzAnswersAsNetHTTP(f *testing.F) {
	for _, tc := range answerCases {
		f.Add([]byte(tc.raw))
	}
	limits := Limits{ReadHeaderTimeout: 2 * time.Second}
	stdAddr, _ := listen(f, echo(nil), false, limits)
	fastAddr, _ := listen(f, echo(nil), true, limits)
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := normalized(exchange(t, fastAddr, string(raw)))
		if len(raw) > 0 && raw[0] == tlsHandshake {
			// A TLS client's first bytes: answered at once, where
			// net/http waits for a head (TestTLSClientAnsweredAtOnce).
			// (exchange writes an answer as its status, fields and body.)
			if len(got) != 1 || !strings.HasPrefix(got[0], "400 Bad Request\n") || !strings.Contains(got[0], "not TLS") {
				t.Errorf("answers to %q: %q, want the refusal of TLS", raw, got)
			}
			return
		}
		want := normalized(exchange(t, stdAddr, string(raw)))
		if !slices.Equal(got, want) {
			t.Errorf("answers to %q differ\nnet/http:\n%s\nfast path:\n%s", raw, strings.Join(want, "\n----\n"), strings.Join(got, "\n----\n"))
		}
	})
}

// A body that came with its head is in the buffer, and its handler
// needs no read deadline for it (httpapi's readJSONBody sets none then);
// one still on its way is not.
func TestBodyInBuffer(t *testing.T) {
	// The first read returns the head and the first part of the body, as
	// a client's first segment would; the rest is not read yet.
	src := io.MultiReader(strings.NewReader(`{"id":1,`), strings.NewReader(`"name":"a"}`))
	br := bufio.NewReader(src)
	if _, err := br.Peek(1); err != nil {
		t.Fatal(err)
	}
	partly := body{br: br, remaining: int64(len(`{"id":1,"name":"a"}`))}
	if partly.InBuffer() {
		t.Errorf("a body with %d of %d bytes in the buffer is said to be in it", br.Buffered(), partly.remaining)
	}
	whole := body{br: br, remaining: int64(br.Buffered())}
	if !whole.InBuffer() {
		t.Error("a body all in the buffer is said not to be")
	}
	if _, err := io.ReadAll(&whole); err != nil {
		t.Fatal(err)
	}
	if !whole.InBuffer() {
		t.Error("a body read to its end is said not to be in the buffer")
	}
}

// What a handler takes from a request as a string stays valid after the
// connection has reused the request for its next ones; and a header map
// grown by a large head is not kept for the next request.
func TestReusedRequestKeepsStrings(t *testing.T) {
	type kept struct{ path, value, query string }
	var mu sync.Mutex
	var got []kept
	keep := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, kept{r.URL.Path, r.Header.Get("X-Keep"), r.URL.RawQuery})
	})
	addr, _ := listen(t, keep, true, Limits{})
	// One at a time, each answer read before the next request is sent:
	// the connection's buffer then takes each head where the last was.
	c, br := dial(t, addr)
	want := []kept{}
	for i := range 5 {
		fmt.Fprintf(c, "GET /plants/%d?q=%d HTTP/1.1\r\n%sX-Keep: value-%d\r\n\r\n", i, i*11, h, i)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		want = append(want, kept{fmt.Sprint("/plants/", i), fmt.Sprint("value-", i), fmt.Sprint("q=", i*11)})
	}
	mu.Lock()
	if !slices.Equal(got, want) {
		t.Errorf("kept %q, want %q", got, want)
	}
	mu.Unlock()

	var parsed parsedRequest
	take := func(string, string) bool { return true }
	var big strings.Builder
	big.WriteString("GET /plants/1 HTTP/1.1\r\nHost: x\r\n")
	for i := range maxKeptFields + 1 {
		fmt.Fprintf(&big, "X-F%d: %d\r\n", i, i)
	}
	big.WriteString("\r\n")
	if _, ok := parseRequest([]byte(big.String()), take, &parsed); !ok || len(parsed.header) != maxKeptFields+1 {
		t.Fatalf("parsed %v, %d fields", ok, len(parsed.header))
	}
	grown := parsed.header
	req, ok := parseRequest([]byte("GET /plants/2 HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\r\n"), take, &parsed)
	if !ok || len(req.Header) != 1 || req.Header.Get("X-A") != "1" {
		t.Fatalf("the next request: %v %v", ok, req.Header)
	}
	if len(grown) != maxKeptFields+1 {
		t.Errorf("the grown map was cleared and kept (%d fields left in it)", len(grown))
	}
}

// An idle connection keeps no large buffer of its last answer: a client
// that leaves connections idle after a large page would otherwise have
// each hold the page twice (the body and the answer) until the idle
// timeout, where the limits count a few KiB a connection.
func TestIdleConnectionKeepsNoLargeBuffer(t *testing.T) {
	for _, size := range []int{40 << 10, 200 << 10} {
		t.Run(fmt.Sprint(size>>10, "KiB"), func(t *testing.T) {
			page := bytes.Repeat([]byte("x"), size)
			addr, _ := listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write(page)
			}), true, Limits{})
			heap := func() uint64 {
				var m runtime.MemStats
				runtime.GC()
				runtime.GC() // a pool keeps its buffers through one collection
				runtime.ReadMemStats(&m)
				return m.HeapInuse
			}
			const conns = 100
			before := heap()
			var idle []net.Conn
			for range conns {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				idle = append(idle, c)
				c.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(c, "GET /plants HTTP/1.1\r\n%s\r\n", h)
				res, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				if n, _ := io.Copy(io.Discard, res.Body); n != int64(size) {
					t.Fatalf("read %d bytes of %d", n, size)
				}
			}
			each := int64(heap()-before) / conns
			for _, c := range idle {
				c.Close()
			}
			if each > 24<<10 {
				t.Errorf("%d idle connections after a %d KiB answer: %d KiB of heap each, want at most 24", conns, size>>10, each>>10)
			}
		})
	}
}
