package http1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// dial opens a connection to addr that fails the test if it hangs.
func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// closedWithin reports whether the server closes c within d.
func closedWithin(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := br.ReadByte()
	return errors.Is(err, io.EOF) || (err != nil && strings.Contains(err.Error(), "reset"))
}

func TestIdleAndHeaderTimeouts(t *testing.T) {
	addr, _ := listen(t, echo(nil), true, Limits{ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})

	t.Run("an idle kept-alive connection is closed", func(t *testing.T) {
		c, br := dial(t, addr)
		fmt.Fprint(c, "GET /plants/1 HTTP/1.1\r\nHost: x\r\n\r\n")
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("answer: %v %v", res, err)
		}
		io.Copy(io.Discard, res.Body)
		if !closedWithin(c, br, 2*time.Second) {
			t.Fatal("the idle connection was not closed")
		}
	})
	t.Run("a head sent too slowly is cut off", func(t *testing.T) {
		c, br := dial(t, addr)
		fmt.Fprint(c, "GET /plants/1 HTTP/1.1\r\n")
		start := time.Now()
		trickle(c, "X-A: 1\r\n", 20)
		if !closedWithin(c, br, 2*time.Second) {
			t.Fatal("the slow head's connection was not closed")
		}
		if took := time.Since(start); took > 1500*time.Millisecond {
			t.Fatalf("closed after %v; the head timeout is 300ms", took)
		}
	})
	t.Run("a connection that sends nothing is closed", func(t *testing.T) {
		c, br := dial(t, addr)
		if !closedWithin(c, br, 2*time.Second) {
			t.Fatal("the silent connection was not closed")
		}
	})
}

func TestBodyReadTimeout(t *testing.T) {
	addr, _ := listen(t, echo(nil), true, Limits{ReadTimeout: 300 * time.Millisecond})
	c, br := dial(t, addr)
	fmt.Fprint(c, "POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nsome")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "timeout") || !res.Close {
		t.Fatalf("got %d %q close=%v; want 400 with the read's timeout, closing", res.StatusCode, body, res.Close)
	}
}

// On a kept-alive connection whose idle timeout is long, a later request
// still has the header timeout for its head and the read timeout for its
// body, from its first byte: the deadlines a connection leaves alone
// while the bytes are already in (conn.go, deadline) are set once more
// must be read.
func TestLaterRequestsKeepTheirTimeouts(t *testing.T) {
	const timeout = 300 * time.Millisecond
	addr, _ := listen(t, echo(nil), true, Limits{ReadHeaderTimeout: timeout, ReadTimeout: timeout, IdleTimeout: time.Minute})
	answered := func(t *testing.T, c net.Conn, br *bufio.Reader) {
		t.Helper()
		for range 3 {
			fmt.Fprint(c, "GET /plants/1 HTTP/1.1\r\nHost: x\r\n\r\n")
			res, err := http.ReadResponse(br, nil)
			if err != nil || res.StatusCode != http.StatusOK {
				t.Fatalf("answer: %v %v", res, err)
			}
			io.Copy(io.Discard, res.Body)
		}
	}
	t.Run("a slow head", func(t *testing.T) {
		c, br := dial(t, addr)
		answered(t, c, br)
		start := time.Now()
		fmt.Fprint(c, "GET /plants/1 HTTP/1.1\r\n")
		go trickle(c, "X-A: 1\r\n", 40)
		if !closedWithin(c, br, 3*time.Second) {
			t.Fatal("the slow head's connection was not closed")
		}
		if took := time.Since(start); took > 5*timeout {
			t.Fatalf("closed after %v; the head timeout is %v", took.Round(time.Millisecond), timeout)
		}
	})
	t.Run("a slow body", func(t *testing.T) {
		c, br := dial(t, addr)
		answered(t, c, br)
		start := time.Now()
		fmt.Fprint(c, "POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nsome")
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "timeout") {
			t.Fatalf("got %d %q; want 400 with the read's timeout", res.StatusCode, body)
		}
		if took := time.Since(start); took > 5*timeout {
			t.Fatalf("answered after %v; the read timeout is %v", took.Round(time.Millisecond), timeout)
		}
	})
}

// A body its handler left unread and over 256 KiB is not read: the answer
// says the connection closes, and arrives whole.
func TestLargeUnreadBodyCloses(t *testing.T) {
	addr, _ := listen(t, echo(nil), true, Limits{})
	c, br := dial(t, addr)
	fmt.Fprintf(c, "POST /plants HTTP/1.1\r\nHost: x\r\nX-Read: no\r\nContent-Length: %d\r\n\r\n", 1<<20)
	c.Write(make([]byte, 64<<10))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK || !res.Close {
		t.Fatalf("got %d close=%v; want 200, closing", res.StatusCode, res.Close)
	}
}

// A handler's panic closes its connection, as net/http does, and the
// server goes on serving.
func TestPanicClosesTheConnection(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plants/panic" {
			panic("boom")
		}
		if r.URL.Path == "/plants/abort" {
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "fine")
	})
	addr, _ := listen(t, h, true, Limits{})
	for _, path := range []string{"/plants/panic", "/plants/abort"} {
		c, br := dial(t, addr)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		if !closedWithin(c, br, 2*time.Second) {
			t.Fatalf("%s: the connection stayed open", path)
		}
	}
	res, err := http.Get("http://" + addr + "/plants/1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != "fine" {
		t.Fatalf("after the panics: %q", body)
	}
}

// Shutdown closes idle connections at once, lets a request in flight
// finish and closes its connection after the answer, refuses new ones, and
// Serve returns http.ErrServerClosed.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plants/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "done")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(h, takePlants, Limits{}, nil)
	std := &http.Server{Handler: h}
	go std.Serve(s.Handoffs())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	addr := ln.Addr().String()

	idle, idleBr := dial(t, addr)
	fmt.Fprint(idle, "GET /plants/1 HTTP/1.1\r\nHost: x\r\n\r\n")
	if res, err := http.ReadResponse(idleBr, nil); err != nil {
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, res.Body)
	}
	busy, busyBr := dial(t, addr)
	fmt.Fprint(busy, "GET /plants/slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if !closedWithin(idle, idleBr, 2*time.Second) {
		t.Fatal("the idle connection was not closed at shutdown")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(busyBr, nil)
	if err != nil {
		t.Fatalf("the request in flight: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	if string(body) != "done" || !res.Close {
		t.Fatalf("the request in flight got %q close=%v; want done, closing", body, res.Close)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a connection was accepted after Shutdown")
	}
	std.Close()
}

// A shutdown out of time with nothing in flight (a timeout of a
// nanosecond, idle keep-alive connections) is no failure.
func TestShutdownOutOfTimeWithNothingInFlight(t *testing.T) {
	addr, s := listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "done") }), true, Limits{})
	for range 3 {
		c, br := dial(t, addr)
		fmt.Fprint(c, "GET /plants/1 HTTP/1.1\r\nHost: x\r\n\r\n")
		if res, err := http.ReadResponse(br, nil); err != nil {
			t.Fatal(err)
		} else {
			io.Copy(io.Discard, res.Body)
		}
	}
	// An answer can reach the client before its goroutine is back to
	// waiting for the next request: let the connections become idle.
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown with nothing in flight: %v", err)
	}
}

// A head still coming in when a shutdown begins is no request in flight:
// its connection is closed at once, not waited for (up to the read-header
// timeout), and the shutdown is no failure. A request whose handler
// still runs is waited for, and reported when the shutdown runs out of
// time.
func TestShutdownWithAHeadComingIn(t *testing.T) {
	release := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plants/slow" {
			<-release
		}
		io.WriteString(w, "done")
	})
	addr, s := listen(t, handler, true, Limits{ReadHeaderTimeout: time.Minute})
	c, br := dial(t, addr)
	fmt.Fprint(c, "GET /plants/1 HTTP/1.1\r\nHost: x\r\n") // no empty line yet
	time.Sleep(100 * time.Millisecond)                     // read by the server
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown with only a head coming in: %v, want nil", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("Shutdown waited %v for a head coming in; want it closed at once", took)
	}
	if !closedWithin(c, br, 5*time.Second) {
		t.Error("the connection whose head was coming in is still open after the shutdown")
	}

	addr, s = listen(t, handler, true, Limits{ReadHeaderTimeout: time.Minute})
	defer close(release)
	c, br = dial(t, addr)
	fmt.Fprint(c, "GET /plants/slow HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(100 * time.Millisecond)
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a handler still running: %v, want the deadline's error", err)
	}
	// Its connection is closed, without an answer.
	if !closedWithin(c, br, time.Second) {
		t.Error("the connection of the handler still running is open after the shutdown's timeout")
	}
}

// slowClosingListener's connections take a second to close, as a TLS
// connection does whose Close sends its close_notify to a client that
// stopped reading (it waits up to 5 s).
type slowClosingListener struct{ net.Listener }

func (l slowClosingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return slowClosingConn{c}, nil
}

type slowClosingConn struct{ net.Conn }

func (c slowClosingConn) Close() error {
	time.Sleep(time.Second)
	return c.Conn.Close()
}

// A shutdown out of time closes the connections left all at once: one
// slow to close does not hold the others' closes, or the shutdown, back
// by as much each.
func TestShutdownClosesSlowConnectionsTogether(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(handler, takePlants, Limits{}, nil)
	go s.Serve(slowClosingListener{inner})
	const conns = 4
	for range conns {
		c, _ := dial(t, inner.Addr().String())
		fmt.Fprint(c, "GET /plants/1 HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	time.Sleep(200 * time.Millisecond) // each handler waiting
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with handlers still running: %v, want the deadline's error", err)
	}
	if took := time.Since(began); took > 2500*time.Millisecond {
		t.Errorf("Shutdown took %v closing %d connections that take 1 s each; want about 1 s, not one after another", took, conns)
	}
}

// Many clients at once, on kept-alive connections, fast and handed-off
// requests side by side: every answer is the right one (run with -race).
// A connection once handed off stays with net/http, so the plant requests
// have a client of their own, and all of them take the fast path.
func TestConcurrentClients(t *testing.T) {
	var taken atomic.Int64
	addr, _ := listen(t, echo(&taken), true, Limits{IdleTimeout: time.Minute})
	plants := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	others := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	const clients, each = 16, 50
	for g := range clients {
		wg.Go(func() {
			client, prefix := plants, "/plants/"
			if g%4 == 3 {
				client, prefix = others, "/other/"
			}
			for i := range each {
				path := fmt.Sprintf("%s%d-%d", prefix, g, i)
				body := fmt.Sprintf(`{"g":%d,"i":%d}`, g, i)
				res, err := client.Post("http://"+addr+path, "application/json", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				got, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if !strings.Contains(string(got), "POST "+path+" ") || !strings.Contains(string(got), fmt.Sprintf("body=%q", body)) {
					errs <- fmt.Errorf("%s: got %q", path, got)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n, want := taken.Load(), int64(clients*3/4*each); n != want {
		t.Errorf("the fast path served %d plant requests, want all %d", n, want)
	}
}

// flakyListener fails its first Accepts as a process out of file
// descriptors does.
type flakyListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// Running out of file descriptors does not stop the server: it waits and
// accepts again, as net/http does.
func TestAcceptRetriesWhenOutOfDescriptors(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &flakyListener{Listener: inner}
	ln.failures.Store(3)
	s := New(echo(nil), takePlants, Limits{}, nil)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	defer s.Shutdown(context.Background())
	client := &http.Client{Timeout: 5 * time.Second}
	res, err := client.Get("http://" + inner.Addr().String() + "/plants/1")
	if err != nil {
		t.Fatalf("after the failed accepts: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v", err)
	default:
	}
}

// A head too long for the fast path's buffer goes to net/http part-read;
// it still has to be in within the header timeout that began with its
// first byte, not within a second one from the hand-over.
func TestLongSlowHeadKeepsItsDeadline(t *testing.T) {
	const timeout = 800 * time.Millisecond
	addr, _ := listen(t, echo(nil), true, Limits{ReadHeaderTimeout: timeout})
	c, br := dial(t, addr)
	start := time.Now()
	// The buffer fills slowly: the head is handed over when it overflows,
	// with most of its time gone.
	fmt.Fprintf(c, "GET /plants/1 HTTP/1.1\r\nHost: x\r\nX-Big: %s", strings.Repeat("b", 2000))
	time.Sleep(timeout * 3 / 8)
	fmt.Fprint(c, strings.Repeat("b", 1500))
	time.Sleep(timeout * 3 / 8)
	fmt.Fprintf(c, "%s\r\n", strings.Repeat("b", 800))
	go trickle(c, "X-More: 1\r\n", 40)
	if !closedWithin(c, br, 3*time.Second) {
		t.Fatal("the slow long head's connection was not closed")
	}
	if took := time.Since(start); took > timeout+timeout/2 {
		t.Fatalf("closed %v after the head began; its header timeout is %v", took.Round(time.Millisecond), timeout)
	}
}

// trickle sends line n times, one every 50 ms, as a slow client does,
// until the server closes the connection.
func trickle(c net.Conn, line string, n int) {
	for range n {
		if _, err := fmt.Fprint(c, line); err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A TLS client on this plain HTTP port gets an answer at once, which its
// TLS library reports as the mistake it is, instead of waiting out the
// head timeout.
func TestTLSClientAnsweredAtOnce(t *testing.T) {
	addr, _ := listen(t, echo(nil), true, Limits{ReadHeaderTimeout: 5 * time.Second})
	start := time.Now()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		c.Close()
		t.Fatal("a TLS handshake with a plain HTTP port succeeded")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the TLS client failed after %v (%v); the head timeout is 5s", took, err)
	}
	raw, br := dial(t, addr)
	raw.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00})
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusBadRequest {
		t.Fatalf("a handshake record's answer: %v, %v", res, err)
	}
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), "not TLS") || res.Header.Get("Content-Type") != "application/json" {
		t.Errorf("a handshake record's answer: %q %s", res.Header, body)
	}
	if _, err := time.Parse(http.TimeFormat, res.Header.Get("Date")); err != nil {
		t.Errorf("a handshake record's answer has no Date: %q", res.Header)
	}
	if !closedWithin(raw, br, time.Second) {
		t.Error("the connection stayed open")
	}
}

// A refusal whose body is not all in (a 401 to a guesser sending slowly)
// is answered at once and the connection closed, instead of both waiting
// for the body up to ReadTimeout. A refusal whose body is all in keeps
// the connection, as net/http does.
func TestRefusalDoesNotWaitForTheBody(t *testing.T) {
	refuse := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	})
	addr, _ := listen(t, refuse, true, Limits{ReadTimeout: 30 * time.Second})
	c, br := dial(t, addr)
	start := time.Now()
	fmt.Fprint(c, "POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"id\":")
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the refusal: %v, %v", res, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the refusal came after %v; the read timeout is 30s", took)
	}
	io.Copy(io.Discard, res.Body)
	if !closedWithin(c, br, 2*time.Second) {
		t.Error("the connection stayed open for the rest of the body")
	}
	// The whole body in: read and dropped, the connection kept.
	c, br = dial(t, addr)
	fmt.Fprint(c, "POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET /plants/1 HTTP/1.1\r\nHost: x\r\n\r\n")
	for i := range 2 {
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("answer %d on a kept connection: %v, %v", i, res, err)
		}
		io.Copy(io.Discard, res.Body)
	}
}

// A head longer than the fast path's buffer goes to net/http while still
// coming in; at shutdown it is cut at once too, not waited for up to the
// read-header timeout, and the request it would have ended is not served.
func TestShutdownWithALongHeadComingIn(t *testing.T) {
	served := make(chan string, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served <- r.URL.Path })
	addr, s := listen(t, handler, true, Limits{ReadHeaderTimeout: time.Minute})
	c, br := dial(t, addr)
	fmt.Fprint(c, "GET /plants/1 HTTP/1.1\r\nHost: x\r\nX-Pad: "+strings.Repeat("a", 6000)+"\r\n") // no empty line yet
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown with a long head coming in: %v, want nil", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("Shutdown waited %v for a long head coming in; want it cut at once", took)
	}
	fmt.Fprint(c, "\r\n") // the head's end, too late
	if !closedWithin(c, br, 5*time.Second) {
		t.Error("the connection whose long head was coming in is still open after the shutdown")
	}
	select {
	case p := <-served:
		t.Errorf("the cut request %s was served", p)
	case <-time.After(100 * time.Millisecond):
	}
}

// headEnds finds the empty line that ends a head, also split across
// reads, with CRLF or bare LF line ends.
func TestHeadEnds(t *testing.T) {
	for _, tc := range []struct {
		reads []string
		ends  int // the read that ends it; -1: none
	}{
		{[]string{"a: b\r\n", "\r\n"}, 1},
		{[]string{"a: b\r", "\n\r", "\n"}, 2},
		{[]string{"a: b\n", "\n"}, 1},
		{[]string{"a: b\r\nc: d\r\n"}, -1},
		{[]string{"a\r\n\r\n"}, 0},
		{[]string{"\r\n", "x\r\n"}, -1},
	} {
		rc := &replayConn{last: [2]byte{'x', 'x'}}
		got := -1
		for i, r := range tc.reads {
			if rc.headEnds([]byte(r)) {
				got = i
				break
			}
		}
		if got != tc.ends {
			t.Errorf("%q: ended at read %d, want %d", tc.reads, got, tc.ends)
		}
	}
}
