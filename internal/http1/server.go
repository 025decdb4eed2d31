// Package http1 is a lean HTTP/1.1 server for a service's busiest routes,
// standing in front of net/http.
//
// It serves the plain requests its Take function accepts (HTTP/1.1, a head
// that fits in one 4 KiB buffer, a body framed by a single Content-Length,
// an origin-form target of ordinary characters), calling an ordinary
// http.Handler with a response writer that sends the whole answer in one
// write. As net/http's ResponseWriter, the request a handler gets is not
// valid after it returns: the connection reuses it, its URL, its header map
// and the slices of field values in it for the next request. A string
// taken from it (a field's value, the path) stays valid. Any
// request it does not take, it does not answer: it hands the
// connection, with every byte read from it put back, to net/http
// (Handoffs), which serves that connection from then on as it would have
// from its first byte (TestAnswersAsNetHTTP, FuzzAnswersAsNetHTTP). So every unusual request (chunked
// bodies, Expect, obsolete line folding, HTTP/1.0, HEAD, OPTIONS, streams,
// oversized or malformed heads) keeps net/http's behaviour, and this
// package needs to be right only about the plain ones.
//
// What it saves, per request, is net/http's generality: its background
// read per request (which lets a request's context end when the client
// hangs up; here handlers get context.Background() and must bound their
// work themselves), the copy of the header map, the chunking logic, and
// separate writes for the head and the body. BENCHMARKS.md has the figures.
package http1

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Limits bound each connection, with net/http's meanings.
type Limits struct {
	ReadHeaderTimeout time.Duration // from a request's first byte to the end of its head
	ReadTimeout       time.Duration // from a request's first byte to the end of its body
	WriteTimeout      time.Duration // from the end of a request's head to the end of its answer
	IdleTimeout       time.Duration // between requests on a kept-alive connection
}

// Server is the fast path. Create it with New; serve with Serve, and serve
// Handoffs with a net/http server configured alike.
type Server struct {
	handler http.Handler
	take    func(method, path string) bool
	limits  Limits
	log     *slog.Logger

	// Reject, when set, composes the whole answer to a connection refused
	// before any request on it was read (a TLS client on this plain
	// port), and may log and count it as the server's other refusals are:
	// remote is the client's address. Nil: a bare Error body. Set it
	// before Serve.
	Reject func(remote net.Addr, status int, message string) []byte

	handoffs *handoffListener

	mu       sync.Mutex
	ln       net.Listener
	conns    map[*conn]struct{}
	partials map[*replayConn]struct{} // handed off with their head coming in
	closing  atomic.Bool
	closed   chan struct{} // closed by Shutdown
	draining sync.WaitGroup
}

// New returns a server that answers with handler the requests take
// accepts (by method and path, before any routing) and hands the rest to
// whoever serves Handoffs. Zero limits are off. log receives the panics
// that escape handler (nil: discarded).
func New(handler http.Handler, take func(method, path string) bool, limits Limits, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{handler: handler, take: take, limits: limits, log: log, conns: map[*conn]struct{}{}, partials: map[*replayConn]struct{}{}, closed: make(chan struct{})}
	s.handoffs = &handoffListener{conns: make(chan net.Conn), closed: s.closed, stop: make(chan struct{})}
	return s
}

// Handoffs is the listener of the connections this server does not serve:
// give it to a net/http server's Serve. Its Addr is the served listener's.
func (s *Server) Handoffs() net.Listener { return s.handoffs }

// Serve accepts connections on ln until Shutdown, serving each in a
// goroutine of its own. It returns http.ErrServerClosed after Shutdown,
// like net/http, and any other error of Accept that is not temporary.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.handoffs.addr.Store(&addrHolder{ln.Addr()})
	s.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if retryable(err) {
				// As net/http does for temporary errors (out of file
				// descriptors): wait, doubling up to a second, and go on.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "in", backoff.String())
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		cc := s.track(c)
		if cc == nil {
			c.Close()
			return http.ErrServerClosed
		}
		go cc.serve()
	}
}

// retryable says whether an Accept error passes: a timeout, or the
// process or system out of descriptors or buffers for now.
func retryable(err error) bool {
	return isTimeout(err) || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (s *Server) track(c net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return nil
	}
	cc := newConn(s, c)
	s.conns[cc] = struct{}{}
	s.draining.Add(1)
	return cc
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.draining.Done()
}

// Shutdown stops accepting, closes the connections waiting for a request,
// lets those serving one finish it (and close), and waits for them until
// ctx ends; then it closes every connection left, and returns ctx's error
// if one was still serving a request. The connections handed off are the
// net/http server's to shut down; Handoffs stops handing more.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing.Swap(true) {
		close(s.closed)
		if s.ln != nil {
			s.ln.Close()
		}
	}
	for c := range s.conns {
		// A head still coming in is no request yet: its client has sent
		// none, and may send it again elsewhere; a slow or stalled one
		// would otherwise hold the drain up to ReadHeaderTimeout.
		if !c.cutIfReadingHead() {
			c.wakeIfIdle()
		}
	}
	// So too for the long heads net/http reads, which its own Shutdown
	// would wait for. Once cut, a head's end is not passed on, so their
	// closes need not be waited for.
	var cut []net.Conn
	for rc := range s.partials {
		if rc.phase.CompareAndSwap(phaseHead, phaseCut) {
			cut = append(cut, rc.Conn)
		}
	}
	s.mu.Unlock()
	go closeAll(cut)
	done := make(chan struct{})
	go func() {
		s.draining.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	// Out of time: close every connection. Those still waiting for a
	// request were only slow to close (a timeout of a nanosecond does
	// that); those serving one give their clients no answer, not one
	// written after the process said it stopped. The timeout is reported
	// only when a request was still being served.
	s.mu.Lock()
	serving := false
	left := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		if c.phase.Load() == phaseServing {
			serving = true
		}
		left = append(left, c.c)
	}
	s.mu.Unlock()
	closeAll(left)
	if serving {
		return ctx.Err()
	}
	return nil
}

// closeAll closes conns all at once and returns when every Close has: a
// TLS connection's Close first sends its close_notify alert, which waits
// for a client that stopped reading (up to 5 s in crypto/tls; httpapi's
// TLS listener holds it to half a second), and one such client must not
// hold the others' closes back by as much each.
func closeAll(conns []net.Conn) {
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { c.Close() })
	}
	wg.Wait()
}

// handoffListener yields the connections the fast path hands to net/http.
type handoffListener struct {
	conns    chan net.Conn
	closed   <-chan struct{} // the Server's Shutdown
	stop     chan struct{}   // this listener's Close
	stopOnce sync.Once
	addr     atomic.Pointer[addrHolder]
}

type addrHolder struct{ net.Addr }

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-l.stop:
		return nil, net.ErrClosed
	}
}

// Close is net/http's, at its shutdown: from then on a connection that
// would be handed off is closed instead.
func (l *handoffListener) Close() error {
	l.stopOnce.Do(func() { close(l.stop) })
	return nil
}

func (l *handoffListener) Addr() net.Addr {
	if a := l.addr.Load(); a != nil {
		return a.Addr
	}
	return &net.TCPAddr{}
}

// give hands c to net/http, or reports false when it no longer accepts.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.closed:
	case <-l.stop:
	}
	return false
}

// replayConn reads the bytes the fast path read, before the rest of the
// connection. net/http's first read deadline on it is for the head of its
// first request, which began here: it is held to the deadline the head
// already had, so a head handed over part-read (over 4 KiB) gets no more
// time than any other.
type replayConn struct {
	net.Conn
	pending      []byte
	headDeadline time.Time // zero: none
	clamped      atomic.Bool
	// For a head handed over while still coming in (srv set): phaseHead
	// until its end has been read, which moves it on unless Shutdown has
	// cut it first (one compare-and-swap decides); last is the two bytes
	// read before, to find an end split across reads.
	srv   *Server
	phase atomic.Int32
	last  [2]byte
}

// trackPartial has Shutdown see rc, a head handed off while still coming
// in; false once Shutdown has begun (net/http's own then stops it).
func (s *Server) trackPartial(rc *replayConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.partials[rc] = struct{}{}
	return true
}

func (c *replayConn) Close() error {
	if c.srv != nil {
		c.srv.mu.Lock()
		delete(c.srv.partials, c)
		c.srv.mu.Unlock()
	}
	return c.Conn.Close()
}

// CloseWrite passes net/http's half-close on (its closeWriteAndWait,
// before closing a connection with a request left unread), which a
// wrapper would otherwise hide: without the FIN first, the close resets
// the connection, and a client may lose the answer with it.
func (c *replayConn) CloseWrite() error { return CloseWrite(c.Conn) }

func (c *replayConn) SetReadDeadline(t time.Time) error {
	if !c.clamped.Swap(true) {
		if !c.headDeadline.IsZero() && (t.IsZero() || t.After(c.headDeadline)) {
			t = c.headDeadline
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	n, err := c.Conn.Read(p)
	if c.srv != nil && c.phase.Load() != phaseServing {
		// The head's end is not passed on once Shutdown has cut it: the
		// request it ends is not served.
		if c.phase.Load() == phaseCut || c.headEnds(p[:n]) && !c.phase.CompareAndSwap(phaseHead, phaseServing) {
			return 0, net.ErrClosed
		}
	}
	return n, err
}

// headEnds says whether b, read after c.last, holds the end of the head
// (an empty line: "\n\n" or "\n\r\n"), and keeps its last two bytes.
func (c *replayConn) headEnds(b []byte) bool {
	for _, x := range b {
		if x == '\n' && (c.last[1] == '\n' || c.last[1] == '\r' && c.last[0] == '\n') {
			return true
		}
		c.last = [2]byte{c.last[1], x}
	}
	return false
}

// The fast path's connection buffer, which must hold a whole head: a
// longer head goes to net/http, whose limits then apply.
const bufferSize = 4 << 10

var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bufferSize) }}
