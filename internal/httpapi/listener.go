package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/plantstore/plantstore/internal/http1"
)

// ServerLimits bound each connection of the HTTP server, so a slow or
// greedy client cannot hold a connection or memory. (The limits on
// requests, in flight, per token and per address, are in Config.)
type ServerLimits struct {
	ReadHeaderTimeout time.Duration // default 5 s
	ReadTimeout       time.Duration // whole request, body included; default 30 s
	WriteTimeout      time.Duration // default 30 s
	IdleTimeout       time.Duration // keep-alive; default 120 s
	MaxHeaderBytes    int           // default 16 KiB
	MaxConnections    int           // open at once (LimitConnections); 0: no cap
	// MaxConnectionsPerAddress is the cap on those from one client
	// address, but the trusted proxies' (ConnLimits); 0: no cap.
	MaxConnectionsPerAddress int
}

// WithDefaults returns l with its zero limits set to their defaults.
func (l ServerLimits) WithDefaults() ServerLimits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = 5 * time.Second
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = 30 * time.Second
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = 30 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 120 * time.Second
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return l
}

// HTTPServer is a net/http server whose Shutdown, out of time, reports
// the timeout only when a request is still being served, as http1's does.
type HTTPServer struct {
	*http.Server
	mu     sync.Mutex
	active map[net.Conn]struct{} // connections between a request's head and its answer's end
}

// NewHTTPServer returns an HTTPServer for handler with limits applied.
func NewHTTPServer(handler http.Handler, l ServerLimits) *HTTPServer {
	l = l.WithDefaults()
	s := &HTTPServer{active: make(map[net.Conn]struct{})}
	s.Server = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		// Let "OPTIONS *" reach our handler too, to be logged and answered
		// like any other request.
		DisableGeneralOptionsHandler: true,
		ConnState:                    s.track,
	}
	return s
}

// track keeps the set of connections net/http counts as active: from a
// request's whole head (or a read error after some of it) to the end of
// its answer.
func (s *HTTPServer) track(c net.Conn, state http.ConnState) {
	s.mu.Lock()
	if state == http.StateActive {
		s.active[c] = struct{}{}
	} else {
		delete(s.active, c)
	}
	s.mu.Unlock()
}

// Shutdown is http.Server's, except when ctx ends first with no request
// being served: the connections left then only have a head coming in
// (net/http closes a new connection's only after 5 s, whatever ctx says),
// so it closes them and returns nil, as for a drain that finished. Their
// clients sent no request and may send it again elsewhere.
func (s *HTTPServer) Shutdown(ctx context.Context) error {
	err := s.Server.Shutdown(ctx)
	if err == nil || ctx.Err() == nil {
		return err
	}
	s.mu.Lock()
	serving := len(s.active) > 0
	s.mu.Unlock()
	if serving {
		return err
	}
	s.Server.Close()
	return nil
}

// ConnLimits are the caps LimitConnections keeps.
type ConnLimits struct {
	// Max is the connections open at once; 0 or less: no cap.
	Max int
	// PerAddress is the connections open at once from one client address
	// (an IPv6 address standing for its /64, as in the other per-address
	// limits); 0 or less: no cap. The addresses in Exempt, proxies that
	// each carry many clients, have none.
	PerAddress int
	Exempt     []netip.Prefix
}

// LimitConnections wraps ln so that at most limits.Max connections are
// open at once, however they are served: past the cap, Accept waits for
// one to close, and a new client waits in the kernel's queue (its own
// connect or request timeout applies) rather than costing memory here. An
// idle keep-alive connection holds its place until --idle-timeout, which
// is what bounds how long the wait can last. The first wait in each
// minute is logged. A connection from an address that already has
// limits.PerAddress open is closed at once, unread and unanswered (it
// cannot wait in the kernel's queue without holding up everyone's): so
// one client cannot take every place, idle connections being free to
// hold. The first such refusal in each minute is logged.
//
// counts, when not nil, is kept up to date (for metrics), with or without
// a cap. With neither, ln is returned as it is.
func LimitConnections(ln net.Listener, limits ConnLimits, log *slog.Logger, counts *ConnCounts) net.Listener {
	if limits.Max <= 0 && limits.PerAddress <= 0 && counts == nil {
		return ln
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if counts == nil {
		counts = new(ConnCounts)
	}
	l := &limitListener{Listener: ln, closed: make(chan struct{}), log: log, counts: counts}
	if limits.Max > 0 {
		l.slots = make(chan struct{}, limits.Max)
	}
	if limits.PerAddress > 0 {
		l.perAddress, l.exempt = limits.PerAddress, limits.Exempt
		l.byAddress = map[netip.Addr]int{}
	}
	return l
}

// ConnCounts are what LimitConnections counts of its connections. Its
// zero value is ready; read it at any time, from any goroutine.
type ConnCounts struct {
	open, waits, refused atomic.Int64
}

// Open is the connections accepted and not yet closed, being served or
// idle, TLS handshakes included.
func (c *ConnCounts) Open() int64 { return c.open.Load() }

// Waits is how many times Accept found the cap reached and stopped
// accepting until a connection closed. A wait begins as soon as the cap
// is reached, whether or not another client is connecting yet: it counts
// the times the server was full, during which any new client waits in
// the kernel's queue.
func (c *ConnCounts) Waits() int64 { return c.waits.Load() }

// Refused is how many connections were closed at once, their address
// over its cap.
func (c *ConnCounts) Refused() int64 { return c.refused.Load() }

type limitListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection; nil: no cap
	closed    chan struct{}
	closeOnce sync.Once
	log       *slog.Logger
	warned    time.Time // only Accept's goroutine touches it, as refusedAt
	refusedAt time.Time
	counts    *ConnCounts

	perAddress int // 0: no cap per address
	exempt     []netip.Prefix
	mu         sync.Mutex
	byAddress  map[netip.Addr]int // connections open from each capped address
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.accept()
		if err != nil {
			return nil, err
		}
		key, ok := l.admit(c.RemoteAddr())
		if !ok {
			l.refuse(c, key)
			continue
		}
		l.counts.open.Add(1)
		return &limitedConn{Conn: c, l: l, key: key}, nil
	}
}

// admit counts a connection from remote against its address's cap, and
// reports false when the cap is reached. key is the address counted, the
// zero Addr when none is (no cap, an exempt or a non-IP address).
func (l *limitListener) admit(remote net.Addr) (key netip.Addr, ok bool) {
	if l.perAddress <= 0 {
		return netip.Addr{}, true
	}
	tcp, ok := remote.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, true
	}
	addr := peerAddr(tcp.AddrPort().Addr())
	if inPrefixes(l.exempt, addr) {
		return netip.Addr{}, true
	}
	addr = addressKey(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byAddress[addr] >= l.perAddress {
		return addr, false
	}
	l.byAddress[addr]++
	return addr, true
}

// refuse closes c, whose address is over its cap, and gives its place
// back.
func (l *limitListener) refuse(c net.Conn, addr netip.Addr) {
	// Counted before the close, so that a client that sees its
	// connection closed finds it counted.
	l.counts.refused.Add(1)
	c.Close()
	if l.slots != nil {
		<-l.slots
	}
	if now := time.Now(); now.Sub(l.refusedAt) >= time.Minute {
		l.refusedAt = now
		name := addr.String()
		if addr.Is6() {
			name = netip.PrefixFrom(addr, 64).String() // counted as one
		}
		l.log.Warn("connection refused: its address has the most connections one may hold open (--max-connections-per-address)",
			"address", name, "max", l.perAddress)
	}
}

// release gives back the place of a connection from key (counted by
// admit) once it closes.
func (l *limitListener) release(key netip.Addr) {
	if key.IsValid() {
		l.mu.Lock()
		if n := l.byAddress[key] - 1; n > 0 {
			l.byAddress[key] = n
		} else {
			delete(l.byAddress, key)
		}
		l.mu.Unlock()
	}
	l.counts.open.Add(-1)
	if l.slots != nil {
		<-l.slots
	}
}

// accept takes a place under the cap, waiting for one if need be, and
// accepts a connection into it.
func (l *limitListener) accept() (net.Conn, error) {
	if l.slots != nil {
		select {
		case l.slots <- struct{}{}:
		default:
			l.counts.waits.Add(1)
			if now := time.Now(); now.Sub(l.warned) >= time.Minute {
				l.warned = now
				l.log.Warn("connection limit reached: new connections wait until one closes (--max-connections)", "max", cap(l.slots))
			}
			select {
			case l.slots <- struct{}{}:
			case <-l.closed:
				return nil, net.ErrClosed
			}
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		if l.slots != nil {
			<-l.slots
		}
		return nil, err
	}
	return c, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitedConn gives its place back once, at its first Close.
type limitedConn struct {
	net.Conn
	l        *limitListener
	key      netip.Addr // its address's count, when one is kept
	released sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.released.Do(func() { c.l.release(c.key) })
	return err
}

// CloseWrite half-closes a TCP connection, as the servers do before a
// close that could otherwise reset an answer not yet read.
func (c *limitedConn) CloseWrite() error { return http1.CloseWrite(c.Conn) }

// JSONErrorListener wraps ln so that the errors net/http answers by itself,
// before any handler runs (431 for oversized headers, 400 for a malformed
// request, 417, 501 for an unknown transfer coding), carry the Error body
// too, and are logged, as no access log line is written for them.
//
// obs, when not nil, counts each such answer as a request (route
// unmatched, method other), so that a flood of malformed requests shows
// in the request metrics as it does in the log.
func JSONErrorListener(ln net.Listener, log *slog.Logger, obs Observer) net.Listener {
	return jsonErrorListener{ln, newRejecter(log, obs)}
}

type jsonErrorListener struct {
	net.Listener
	rejecter
}

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return jsonErrorConn{c, l.rejecter}, nil
}

type jsonErrorConn struct {
	net.Conn
	rejecter
}

// net/http writes each of these answers in one Write, shaped
// "HTTP/1.1 NNN Text[: detail]" followed by exactly these headers. Answers
// from handlers always carry a Date and a length, so they never match.
var plainErrorHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")

// net/http answers 417 to an Expect other than 100-continue by itself,
// with an empty body, before any handler runs; no handler of ours answers
// 417, so any 417 is that one. Matching the whole line with its CRLF keeps
// a body from forging it: a write can begin anywhere in a body, but our
// bodies are JSON, which holds no raw line breaks.
var expectationFailed = []byte("HTTP/1.1 417 Expectation Failed\r\n")

func (c jsonErrorConn) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, expectationFailed) {
		return c.writeError(p, http.StatusExpectationFailed, "only the expectation 100-continue is supported")
	}
	if !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) || len(p) < 13 {
		return c.Conn.Write(p)
	}
	statusLine, rest, ok := bytes.Cut(p, []byte("\r\n"))
	if !ok || !bytes.HasPrefix(rest, plainErrorHeaders[2:]) {
		return c.Conn.Write(p)
	}
	status, err := strconv.Atoi(string(statusLine[9:12]))
	if err != nil || status < 400 {
		return c.Conn.Write(p)
	}
	// The plain body repeats the status line, possibly with a detail.
	detail := strings.TrimPrefix(string(rest[len(plainErrorHeaders)-2:]), strconv.Itoa(status)+" "+http.StatusText(status))
	detail = strings.TrimPrefix(detail, ": ")
	var message string
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		message = "the request's header fields are too large"
	case http.StatusBadRequest:
		message = "malformed HTTP request"
	default:
		message = strings.ToLower(http.StatusText(status))
	}
	if detail != "" {
		message += ": " + detail
	}
	return c.writeError(p, status, message)
}

// CloseWrite passes net/http's half-close on, as replayConn does.
func (c jsonErrorConn) CloseWrite() error { return http1.CloseWrite(c.Conn) }

// writeError sends the Error body in place of p, a whole answer net/http
// wrote before closing the connection.
func (c jsonErrorConn) writeError(p []byte, status int, message string) (int, error) {
	if _, err := c.Conn.Write(c.rejection(c.RemoteAddr(), status, message)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Rejection returns what composes the answer to a connection refused
// before any request on it was read, logged and counted (obs may be nil)
// as the listeners' refusals are: for the lean server's Reject.
func Rejection(log *slog.Logger, obs Observer) func(remote net.Addr, status int, message string) []byte {
	return newRejecter(log, obs).rejection
}

// rejecter answers the requests refused before any handler ran.
type rejecter struct {
	log *slog.Logger
	obs Observer // nil: not counted
}

// newRejecter is a rejecter logging to log (nil: nowhere) and counting
// with obs (nil: not counted).
func newRejecter(log *slog.Logger, obs Observer) rejecter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return rejecter{log, obs}
}

// rejection logs and counts a request refused before any handler ran, and
// returns the whole answer that closes its connection: the Error body,
// with a request id like every other answer's.
func (j rejecter) rejection(remote net.Addr, status int, message string) []byte {
	if j.obs != nil {
		j.obs.RequestStarted()
		j.obs.RequestDone("", "", status, 0)
	}
	id := newRequestID()
	j.log.LogAttrs(context.Background(), slog.LevelInfo, "request rejected before routing",
		slog.Int("status", status), slog.String("message", message), slog.String("request_id", id), slog.String("remote", remote.String()))
	body, _ := json.Marshal(errorBody{Error: int32(status), Message: message})
	// Date, as in every other answer: RFC 9110 (section 6.6.1) has an
	// origin server with a clock send it in every 4xx.
	answer := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"+
		"X-Content-Type-Options: nosniff\r\nX-Request-Id: %s\r\nDate: ", status, http.StatusText(status), len(body), id)
	answer = http1.AppendDate(answer)
	answer = append(answer, "\r\nConnection: close\r\n\r\n"...)
	return append(answer, body...)
}

// TLSConfig is the server's TLS: the certificate and key in PEM files,
// read again when they change (certFiles, which logs to log), TLS 1.2 at
// least, and for TLS 1.2 only forward-secret AEAD suites (TLS 1.3's are
// all such). It speaks HTTP/1.1 (and 1.0): the listener wrappers below
// stand between net/http and the TLS connection, so HTTP/2 is not offered.
func TLSConfig(certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	files, err := loadCertFiles(certFile, keyFile, log)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		GetCertificate: files.GetCertificate,
		MinVersion:     tls.VersionTLS12,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
		// An HTTP/1.0 client that names its protocol is served too.
		NextProtos: []string{"http/1.1", "http/1.0"},
	}, nil
}

// TLSListener serves TLS with cfg on the connections ln accepts, and
// answers a client that speaks plain HTTP to it with 400 and the Error
// body, as net/http does by itself when it does the TLS (the JSON error
// wrappers stand between it and the TLS connection here, so it cannot
// tell): without it such a client gets an empty reply, and no clue. The
// first bytes decide: a TLS handshake begins with a record of type 22, an
// HTTP request with a method's capital letters.
// obs counts the refusals as JSONErrorListener's does.
func TLSListener(ln net.Listener, cfg *tls.Config, log *slog.Logger, obs Observer) net.Listener {
	return tlsListener{ln, cfg, newRejecter(log, obs)}
}

type tlsListener struct {
	net.Listener
	cfg *tls.Config
	rejecter
}

// Accept returns at once: the first bytes are read by the connection's
// first Read, in the connection's own goroutine and under its deadline.
func (l tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffedConn{Conn: c, cfg: l.cfg, rejecter: l.rejecter}, nil
}

// sniffedConn is a connection that becomes TLS, or refuses plain HTTP,
// on its first use.
type sniffedConn struct {
	net.Conn
	cfg *tls.Config
	rejecter
	once   sync.Once
	err    error
	mu     sync.Mutex  // guards tls and peeked: Close may come from another goroutine
	tls    *tls.Conn   // nil until the first use, and when the client spoke plain HTTP
	peeked *peekedConn // what tls runs over
}

func (c *sniffedConn) start() error {
	c.once.Do(func() {
		br := bufio.NewReaderSize(c.Conn, 512)
		first, err := br.Peek(1)
		if err != nil {
			c.err = err
			return
		}
		if b := first[0]; b >= 'A' && b <= 'Z' {
			c.refusePlainHTTP()
			c.err = io.EOF
			return
		}
		c.mu.Lock()
		c.peeked = &peekedConn{Conn: c.Conn, r: br}
		c.tls = tls.Server(c.peeked, c.cfg)
		c.mu.Unlock()
	})
	return c.err
}

// refusePlainHTTP answers the plain HTTP request begun on c and closes
// the connection. The rest of the request is still unread, and a close
// with bytes unread resets the connection, which on some client stacks
// loses the answer: so, as net/http does before such a close, it sends
// its FIN first, and reads what the client still sends for a moment.
func (c *sniffedConn) refusePlainHTTP() {
	const message = "the client sent an HTTP request to an HTTPS server: use https://"
	c.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.Conn.Write(c.rejection(c.RemoteAddr(), http.StatusBadRequest, message))
	http1.CloseWrite(c.Conn)
	c.Conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.CopyN(io.Discard, c.Conn, maxRefusedDrain)
	c.Conn.Close()
}

// maxRefusedDrain bounds what a refused connection is read for, after
// its answer, before it is closed.
const maxRefusedDrain = 256 << 10

func (c *sniffedConn) Read(p []byte) (int, error) {
	if err := c.start(); err != nil {
		return 0, err
	}
	return c.tls.Read(p)
}

func (c *sniffedConn) Write(p []byte) (int, error) {
	if err := c.start(); err != nil {
		return 0, err
	}
	return c.tls.Write(p)
}

func (c *sniffedConn) Close() error {
	c.mu.Lock()
	t, peeked := c.tls, c.peeked
	c.mu.Unlock()
	if t != nil {
		peeked.closing.Store(true)
		return t.Close()
	}
	return c.Conn.Close()
}

// peekedConn reads what was peeked at before the rest of the connection.
type peekedConn struct {
	net.Conn
	r       *bufio.Reader
	closing atomic.Bool // its TLS connection's Close has begun
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// SetWriteDeadline holds a closing connection's last write, TLS's
// close_notify alert, to closeNotifyWait: tls.Conn's Close gives it 5 s,
// which a client that stopped reading takes whole, and whoever closes
// waits as long (net/http's Server.Close closes its connections one after
// another).
func (c *peekedConn) SetWriteDeadline(t time.Time) error {
	if c.closing.Load() {
		if limit := time.Now().Add(closeNotifyWait); t.IsZero() || t.After(limit) {
			t = limit
		}
	}
	return c.Conn.SetWriteDeadline(t)
}

// closeNotifyWait is how long a closing TLS connection waits to send its
// close_notify alert: a client that reads takes its few bytes at once.
const closeNotifyWait = 500 * time.Millisecond

// headerBytesExceeded answers 431, and reports true, when r's line and
// header fields, counted as sent, exceed MaxHeaderBytes: Go's own limit
// has slack (see Config.MaxHeaderBytes), and a limit should mean what it
// says. observe asks it first, before routing; CORS has marked the answer.
func (s *Server) headerBytesExceeded(w http.ResponseWriter, r *http.Request) bool {
	limit := s.cfg.MaxHeaderBytes
	if limit <= 0 {
		return false
	}
	n := headerBytes(r)
	if n <= limit {
		return false
	}
	w.Header().Set("Connection", "close")
	s.writeError(w, r, errorStatus(http.StatusRequestHeaderFieldsTooLarge,
		"the request's header fields are too large: %d bytes, over the limit of %d", n, limit))
	return true
}

// headerBytes is the size of r's request line and header fields as a
// client sends them: "METHOD target HTTP/1.1", each field as
// "Name: value", each line ended by CRLF, and the empty line. Go's server
// keeps the Host field apart, and a chunked request's coding, and trims
// the spaces around values; a client that sends more or fewer spaces
// differs from this by as many. What Go's server drops unseen is not
// counted: a Content-Length sent beside Transfer-Encoding, an HTTP/1.0
// request's Transfer-Encoding, and the Host field of a request whose
// target is an absolute URL, which counts as the URL's host.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for _, coding := range r.TransferEncoding {
		n += len("Transfer-Encoding: ") + len(coding) + 2
	}
	for name, values := range r.Header {
		for _, v := range values {
			n += len(name) + 2 + len(v) + 2
		}
	}
	return n + 2
}

// JSONErrors gives the plain-text refusals of a handler that is not the
// API's (the side listeners' mux, with its 404 and 405, a profile's bad
// parameters) the Error body every answer of the API has, their text as
// its message.
func JSONErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jw := &jsonErrorWriter{ResponseWriter: w}
		next.ServeHTTP(jw, r)
		if jw.status == 0 {
			return
		}
		writeJSON(w, jw.status, errorBody{Error: int32(jw.status), Message: strings.ToValidUTF8(strings.TrimSpace(jw.text.String()), "\uFFFD")})
	})
}

// jsonErrorWriter holds back a plain-text answer of 400 or more (what
// http.Error writes), for JSONErrors to send as JSON.
type jsonErrorWriter struct {
	http.ResponseWriter
	status int // the held answer's; 0 when none is held
	text   strings.Builder
}

func (w *jsonErrorWriter) WriteHeader(status int) {
	if status >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = status
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *jsonErrorWriter) Write(p []byte) (int, error) {
	if w.status != 0 {
		return w.text.Write(p)
	}
	return w.ResponseWriter.Write(p)
}

// Flush lets a profile or trace stream as it would unwrapped.
func (w *jsonErrorWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.status == 0 {
		f.Flush()
	}
}
