package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The load generator's HTTP/1.1 client: one keep-alive TCP connection per
// worker, one request in flight on it at a time (no pipelining). It writes
// the request's bytes, reads the status line and the headers, and reads
// the body by its Content-Length (or its chunks, which Go's servers send
// for answers over 2 KiB). Any protocol error is an error: the connection
// is closed and the next request dials a new one. net/http's client costs
// several times more CPU per request, which made the generator, not the
// server, the limit once it had one core of its own.

// A requester sends one request and reads its whole answer.
type requester interface {
	do(method, path string, body []byte) (status int, err error)
	close()
}

type leanConn struct {
	addr     string // host:port
	header   []byte // the Host and Authorization lines
	deadline time.Time
	conn     net.Conn
	r        *bufio.Reader
	req      []byte // the request being sent, reused
}

// newLeanConn is a connection to t, dialed on its first request; every
// read and write on it fails after deadline.
func newLeanConn(t target, deadline time.Time) requester {
	addr := strings.TrimPrefix(t.url, "http://")
	return &leanConn{
		addr:     addr,
		header:   []byte("Host: " + addr + "\r\nAuthorization: Bearer " + t.token + "\r\n"),
		deadline: deadline,
	}
}

var errProtocol = errors.New("malformed HTTP answer")

func (c *leanConn) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

func (c *leanConn) do(method, path string, body []byte) (int, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
		if err != nil {
			time.Sleep(10 * time.Millisecond) // no hot loop on a server that is gone
			return 0, err
		}
		conn.SetDeadline(c.deadline)
		c.conn = conn
		if c.r == nil {
			c.r = bufio.NewReaderSize(conn, 16<<10)
		} else {
			c.r.Reset(conn)
		}
	}
	b := append(c.req[:0], method...)
	b = append(b, ' ')
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\n"...)
	b = append(b, c.header...)
	if body != nil {
		b = append(b, "Content-Type: application/json\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	b = append(b, body...)
	c.req = b
	status, keep, err := c.exchange(b)
	if err != nil || !keep {
		c.close()
	}
	return status, err
}

// exchange writes req and reads the answer; keep is whether the
// connection may carry another request.
func (c *leanConn) exchange(req []byte) (status int, keep bool, err error) {
	if _, err := c.conn.Write(req); err != nil {
		return 0, false, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 14 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, false, errProtocol
	}
	status, ok := parseUint(line[9:12], 10)
	if !ok || status < 200 { // 1xx: never asked for (no Expect header)
		return 0, false, errProtocol
	}
	keep = line[7] == '1'
	length, chunked := -1, false
	for {
		line, err = c.r.ReadSlice('\n')
		if err != nil {
			return status, false, err
		}
		if len(line) <= 2 { // the empty line ending the headers
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return status, false, errProtocol
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, ok = parseUint(value, 10); !ok {
				return status, false, errProtocol
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(value, []byte("chunked")) {
				return status, false, errProtocol
			}
			chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			}
		}
	}
	switch {
	case status == 204 || status == 304:
	case chunked:
		err = c.discardChunks()
	case length >= 0:
		_, err = c.r.Discard(length)
	default: // the body runs to the connection's end
		_, err = io.Copy(io.Discard, c.r)
		keep = false
	}
	return status, keep && err == nil, err
}

// discardChunks reads a chunked body and its trailer.
func (c *leanConn) discardChunks() error {
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, _, _ := bytes.Cut(bytes.TrimSpace(line), []byte(";"))
		n, ok := parseUint(size, 16)
		if !ok {
			return errProtocol
		}
		if n == 0 {
			for { // trailer lines, up to an empty one
				line, err := c.r.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(line) <= 2 {
					return nil
				}
			}
		}
		if _, err := c.r.Discard(n); err != nil {
			return err
		}
		if line, err = c.r.ReadSlice('\n'); err != nil {
			return err
		} else if len(line) > 2 {
			return errProtocol
		}
	}
}

// parseUint parses up to 10 digits in base 10 or 16, without allocating.
func parseUint(b []byte, base int) (int, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	n := 0
	for _, ch := range b {
		var d int
		switch {
		case '0' <= ch && ch <= '9':
			d = int(ch - '0')
		case base == 16 && 'a' <= ch && ch <= 'f':
			d = int(ch-'a') + 10
		case base == 16 && 'A' <= ch && ch <= 'F':
			d = int(ch-'A') + 10
		default:
			return 0, false
		}
		n = n*base + d
	}
	return n, true
}

// netHTTPConn is the generator's former client, net/http's, kept for
// -calibrate's comparison.
type netHTTPConn struct {
	t      target
	client *http.Client
}

func newNetHTTPConn(t target, deadline time.Time) requester {
	return &netHTTPConn{t: t, client: &http.Client{Transport: newTransport(1), Timeout: time.Until(deadline)}}
}

func (c *netHTTPConn) do(method, path string, body []byte) (int, error) {
	return send(context.Background(), c.client, c.t, method, path, body)
}

func (c *netHTTPConn) close() { c.client.CloseIdleConnections() }
