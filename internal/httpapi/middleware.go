package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/plantstore/plantstore"
)

type requestInfoKey struct{}

// requestInfo travels in the request's context so inner layers can add to
// the access log line.
type requestInfo struct {
	id      string
	token   string // name of the authenticated token, never the secret
	tokenID int64  // its id, for the limits per token
	limit   string // the limit that refused the request, if one did
	route   string // the pattern that matched, "" when none did
	// bodyRead says a handler began reading the request's body: an error
	// before then refuses a body never read (recorder.refuseBody).
	bodyRead bool
	// bodyIn is when a body that had to be waited for was all in; zero
	// when it came with the head (storeContext).
	bodyIn time.Time
	// conn is the request's own context, which ends when its client goes
	// away; the handlers' context is the shared deadline's (deadlines).
	conn context.Context
}

// infoContext carries a request's info, as context.WithValue would, but
// inside observe's one allocation a request.
type infoContext struct {
	context.Context
	info *requestInfo
}

func (c *infoContext) Value(key any) any {
	if key == (requestInfoKey{}) {
		return c.info
	}
	return c.Context.Value(key)
}

func infoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	if info == nil {
		return &requestInfo{conn: ctx}
	}
	return info
}

func requestID(ctx context.Context) string { return infoFrom(ctx).id }

// observe is the outermost layer: it gives each request an id and the
// context that bounds its work, writes one access log line per request,
// and makes sure every non-2xx answer carries the Error body, including
// those written by the mux (404, 405, redirects to a cleaned path) or by
// anything else that does not speak JSON.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if s.cfg.Observer != nil {
			s.cfg.Observer.RequestStarted()
		}
		// The request's info, its recorder, its context and its
		// X-Request-Id header value in one allocation.
		held := &struct {
			info requestInfo
			rec  recorder
			ctx  infoContext
			id   [1]string
		}{info: requestInfo{id: incomingRequestID(r.Header["X-Request-Id"]), conn: r.Context()}}
		info := &held.info
		h := w.Header()
		held.id[0] = info.id
		h["X-Request-Id"] = held.id[:]
		h["X-Content-Type-Options"] = nosniff
		if r.TransferEncoding != nil || !r.ProtoAtLeast(1, 1) {
			// A chunked request may also have carried a Content-Length,
			// which net/http drops before a handler could tell: such a
			// request may be smuggling another past a proxy that reads
			// the length, and RFC 9112 (section 6.1) has the server close
			// the connection after answering it. So too for any HTTP/1.0
			// request: net/http drops its Transfer-Encoding unread and
			// frames it by its length, or as bodiless, where RFC 9112
			// has the framing treated as faulty. Clients of this API send
			// lengths over HTTP/1.1; one that sends chunks, or speaks
			// HTTP/1.0, reconnects.
			h["Connection"] = closeConnection
		}
		if s.cfg.TLS {
			h["Strict-Transport-Security"] = hsts
		}
		rec := &held.rec
		rec.ResponseWriter, rec.r, rec.publicURL, rec.info = w, r, s.cfg.PublicURL, info
		held.ctx = infoContext{Context: s.deadlines.context(start), info: info}
		ctx := &held.ctx
		reached := r.Context()
		r = r.WithContext(ctx)
		// No page asks OPTIONS *: it is answered as Go's server would
		// (serverOptions), without CORS.
		preflight := !asksServerOptions(r) && s.cors(rec, r)
		switch {
		case s.headerBytesExceeded(rec, r), s.refusedProtocol(rec, r, reached), serverOptions(rec, r):
			// answered
		case preflight:
			answerPreflight(rec)
		default:
			next.ServeHTTP(rec, r)
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		took := time.Since(start)
		if s.cfg.Observer != nil {
			s.cfg.Observer.RequestDone(info.route, r.Method, rec.status, took)
		}
		s.logRequest(ctx, &accessEntry{start: start, method: maskTokens(r.Method), path: maskTokens(r.URL.Path), status: rec.status,
			duration: took, bytes: rec.bytes, info: info, remote: r.RemoteAddr, client: s.forwardedClient(r)})
	})
}

// incomingRequestID keeps a caller's X-Request-Id when it is short and
// plain, so ids can be followed across services, and makes one otherwise.
// The ids we make begin "ps-", and a caller's that does (in any case) is not kept, so
// an id in the log is always told apart: ours, or the caller's. Nor is
// one that holds a token (one maskTokens would mask): a client that put
// its token there by mistake must not have it logged. Nor is an id sent
// in more than one header field: which one would the caller follow? (A
// proxy that adds its own beside the client's should replace it.)
func incomingRequestID(ids []string) string {
	if len(ids) == 1 && keptRequestID(ids[0]) {
		return ids[0]
	}
	return newRequestID()
}

// keptRequestID says whether a caller's id is one incomingRequestID keeps.
func keptRequestID(id string) bool {
	return len(id) > 0 && len(id) <= 128 && !(len(id) >= len(requestIDPrefix) && strings.EqualFold(id[:len(requestIDPrefix)], requestIDPrefix)) && strings.IndexFunc(id, func(r rune) bool {
		return r <= ' ' || r > '~' || r == '"' || r == '\\'
	}) < 0 && maskTokens(id) == id
}

// maskTokens is a request's path, or method, as the access log shows it,
// with any token in it masked, so that a token sent there by mistake
// (GET /plants/pst_…) is not logged: what follows a token's prefix, in
// any case ("PST_…" too), and a run that holds a token's secret without
// its prefix (plantstore.HoldsTokenSecret). The answer may still quote it:
// it goes back to the client that sent it.
func maskTokens(s string) string {
	if len(s) < plantstore.TokenLength-len(plantstore.TokenPrefix) && strings.IndexByte(s, '_') < 0 {
		return s // too short for a secret, and no prefix: most paths
	}
	var b strings.Builder
	copied := 0               // s[:copied] is in b
	budget := maxSecretChecks // for the whole string, however long
	for i := 0; i < len(s); {
		if !isTokenByte(s[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(s) && isTokenByte(s[j]) {
			j++
		}
		if keep, ok := maskRun(s[i:j], &budget); ok {
			b.WriteString(s[copied:i])
			b.WriteString(keep)
			b.WriteString("xxxxx")
			copied = j
		}
		i = j
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

// maskRun says whether run, a run of token bytes, holds a token, and what
// of it the log keeps: up to and with its first token prefix, or nothing
// when a secret comes before any prefix. The rest of the run is masked
// whole ("pst_pst_…" too).
func maskRun(run string, budget *int) (keep string, ok bool) {
	p := len(plantstore.TokenPrefix)
	for end := p; end <= len(run); end++ {
		if isPrefix(run[end-p : end]) {
			if plantstore.HoldsTokenSecret(run[:end-p], budget) {
				return "", true
			}
			return run[:end], end < len(run)
		}
	}
	return "", plantstore.HoldsTokenSecret(run, budget)
}

// isPrefix says whether s, as long as a token's prefix, is the prefix in
// any case: what follows "PST_" is the secret all the same.
func isPrefix(s string) bool {
	for i := range len(plantstore.TokenPrefix) {
		// Setting bit 0x20 folds an ASCII upper-case letter to lower
		// case, and makes no other byte a lower-case letter.
		if c, want := s[i], plantstore.TokenPrefix[i]; c != want && c|0x20 != want {
			return false
		}
	}
	return true
}

// maxSecretChecks bounds the positions maskTokens checks for a secret
// without its prefix (each one an alphabet check and a checksum of 36
// bytes), so that a 16 KiB path of letters costs the log tens of
// microseconds, not a millisecond. An X-Request-Id, at most 128 bytes,
// is checked at every position.
const maxSecretChecks = 128

// isTokenByte says whether c may be part of a token after its prefix:
// base62, and '_'.
func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

// Request ids need to be unique, not secret: a random part per process
// and a counter, which costs no system call per request.
const requestIDPrefix = "ps-"

var (
	requestIDProcess = func() string {
		var b [8]byte
		rand.Read(b[:])
		return requestIDPrefix + hex.EncodeToString(b[:]) + "-"
	}()
	requestCounter atomic.Uint64
)

func newRequestID() string {
	var b [64]byte // the process part is 20 bytes, a counter at most 13
	return string(strconv.AppendUint(append(b[:0], requestIDProcess...), requestCounter.Add(1), 36))
}

// hsts asks browsers to use only HTTPS for this host for two years, when
// the service serves TLS itself (behind a proxy, the proxy says so).
var hsts = []string{"max-age=63072000"}

var closeConnection = []string{"close"}

// recorder notes the status and size of an answer, and rewrites a non-2xx
// answer that is not JSON into the Error body.
type recorder struct {
	http.ResponseWriter
	r       *http.Request
	status  int
	bytes   int64
	discard bool // the body written by the handler is replaced
	// publicURL is Config.PublicURL: a redirect the mux makes to a path
	// ("/plants") is sent to it, as the path under a proxy's prefix.
	publicURL string
	info      *requestInfo
}

func (rec *recorder) WriteHeader(status int) {
	if rec.status != 0 {
		return
	}
	rec.status = status
	if !rec.info.bodyRead && (rec.r.ContentLength != 0 || rec.r.TransferEncoding != nil) {
		rec.refuseBody()
	}
	h := rec.Header()
	if loc := h["Location"]; rec.publicURL != "" && len(loc) == 1 && strings.HasPrefix(loc[0], "/") && !strings.HasPrefix(loc[0], "//") {
		h["Location"] = []string{rec.publicURL + loc[0]}
	}
	if status < 300 || status == http.StatusNotModified || strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		rec.ResponseWriter.WriteHeader(status)
		return
	}
	// The message may quote the request's path, which need not be UTF-8;
	// JSON must be.
	message := strings.ToValidUTF8(rec.defaultMessage(status), "\uFFFD")
	body, _ := json.Marshal(errorBody{Error: int32(status), Message: message})
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", fmt.Sprint(len(body)))
	rec.ResponseWriter.WriteHeader(status)
	n, _ := rec.ResponseWriter.Write(body)
	rec.bytes += int64(n)
	rec.discard = true
}

// refuseBody closes the connection after an answer that leaves a body
// unread (a refusal: no token, a limit; or a route that takes none, such
// as DELETE), unless the body is all in already (the lean server says
// so). Otherwise net/http would read the rest before answering (a
// Content-Length) or after it (chunks), and a body sent slowly, or never,
// would hold the answer or the connection up to --read-timeout; the lean
// server closes such a connection itself.
func (rec *recorder) refuseBody() {
	if b, ok := rec.r.Body.(interface{ InBuffer() bool }); ok && b.InBuffer() {
		return
	}
	rec.Header()["Connection"] = closeConnection
	http.NewResponseController(rec.ResponseWriter).SetReadDeadline(time.Now())
}

func (rec *recorder) defaultMessage(status int) string {
	switch status {
	case http.StatusBadRequest:
		return fmt.Sprintf("the request target %q is not a path this service serves", truncate(rec.r.RequestURI, 200))
	case http.StatusNotFound:
		return fmt.Sprintf("there is no resource at %s", truncate(target(rec.r), 200))
	case http.StatusMethodNotAllowed:
		return fmt.Sprintf("method %s is not allowed on %s; allowed: %s",
			truncate(rec.r.Method, 20), truncate(target(rec.r), 200), rec.Header().Get("Allow"))
	case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return fmt.Sprintf("the path is not in canonical form; use %s", truncate(rec.Header().Get("Location"), 200))
	}
	return strings.ToLower(http.StatusText(status))
}

// target names what a request asked for in messages: its path as sent
// (escaped: /plants%2F1 is not /plants/1), or, for a request without one
// (CONNECT's "host:port", OPTIONS's "*"), the target as sent.
func target(r *http.Request) string {
	if r.URL.Path != "" {
		return r.URL.EscapedPath()
	}
	return r.RequestURI
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.discard {
		return len(p), nil
	}
	n, err := rec.ResponseWriter.Write(p)
	rec.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

// recoverPanics turns a panic in a handler into a 500 with the Error body,
// logging the stack, and keeps the server running.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.LogAttrs(r.Context(), slog.LevelError, "panic",
				slog.String("request_id", requestID(r.Context())),
				slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
			if rec, ok := w.(*recorder); ok && rec.status != 0 {
				// The answer has begun; all we can do is cut it short.
				panic(http.ErrAbortHandler)
			}
			s.writeError(w, r, fmt.Errorf("panic: %v", v))
		}()
		next.ServeHTTP(w, r)
	})
}

// deadlines hands out the contexts that bound a request's work, so a
// stuck store cannot hold a request forever. Every request that starts
// within one tick shares one context, whose deadline is the timeout after
// the tick ends: one timer a tick instead of a timer, a context and a
// registration with the connection's context per request, for a deadline
// at most a tick (a hundredth of the timeout) late.
//
// The context is not the request's own, so a client that hangs up does
// not cut its request's work short: that work is bounded by the timeout
// anyway, and a create may commit after its client left whichever way
// (a retry is an idempotent replay).
type deadlines struct {
	timeout, tick time.Duration
	current       atomic.Pointer[deadlineTick]
	mu            sync.Mutex // held to start the next tick
}

type deadlineTick struct {
	ends time.Time // requests starting before this share ctx
	ctx  context.Context
	// cancel is never called early: the deadline's own timer cancels the
	// context and releases it.
	cancel context.CancelFunc
}

func newDeadlines(timeout time.Duration) *deadlines {
	return &deadlines{timeout: timeout, tick: min(max(timeout/100, time.Millisecond), 100*time.Millisecond)}
}

// context returns the context of a request that starts at now.
func (d *deadlines) context(now time.Time) context.Context {
	if t := d.current.Load(); t != nil && now.Before(t.ends) {
		return t.ctx
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if t := d.current.Load(); t != nil && now.Before(t.ends) {
		return t.ctx
	}
	ends := now.Truncate(d.tick).Add(d.tick)
	ctx, cancel := context.WithDeadline(context.Background(), ends.Add(d.timeout))
	d.current.Store(&deadlineTick{ends: ends, ctx: ctx, cancel: cancel})
	return ctx
}

// refusedProtocol refuses, with the connection closed as for any malformed
// request, what Go's server lets through to the handlers but this service
// cannot serve, and says whether it did:
//   - HTTP/2's connection preface ("PRI * HTTP/2.0", h2c with prior
//     knowledge), which gets 505 as any HTTP version but 1.x does;
//   - a Host header validHost refuses, which gets 400: RFC 9112 (section
//     3.2) asks it, and every link the service makes starts with the
//     Host. An empty Host is refused too, since an http URL has a host
//     (RFC 9110, section 4.2.1);
//   - a path with a '#', which gets 400: a URL's fragment stays with the
//     client (RFC 9110, section 7.1), and no request target's grammar has
//     one (RFC 9112, section 3.2). Go's server keeps it in the path, where
//     it met each route differently ("/plants#x" 404, "/plants/1#x" a bad
//     id). One in the query is left to the parameter it falls in, as
//     Go's server reads it ("?tag=#herb" is the tag "#herb"): clients
//     have sent it so.
//
// An HTTP/1.0 request may come without Host: it is given the address it
// reached (reachedHost, from the connection's context), which its links
// then name. It runs after the header limit, which counts the request as
// sent, and before a preflight is answered: it refuses preflights too.
func (s *Server) refusedProtocol(w http.ResponseWriter, r *http.Request, reached context.Context) bool {
	if r.Host == "" && !r.ProtoAtLeast(1, 1) {
		r.Host = reachedHost(reached)
	}
	// An absolute-form target ("GET http://host/plants") names the host
	// itself, and Go takes it over the Host header; one with no host, or
	// with user information, is refused as such a Host header would be
	// (RFC 9110, sections 4.2.1 and 4.2.4), and so is one of a scheme
	// other than http or https: the service serves no other.
	absolute := r.URL.Scheme != ""
	badAuthority := absolute && (r.URL.Host == "" || r.URL.User != nil ||
		!strings.EqualFold(r.URL.Scheme, "http") && !strings.EqualFold(r.URL.Scheme, "https"))
	target, _, _ := strings.Cut(r.RequestURI, "?")
	fragment := strings.IndexByte(target, '#') >= 0
	if r.ProtoMajor == 1 && validHost(r.Host) && !badAuthority && !fragment {
		return false
	}
	w.Header().Set("Connection", "close")
	switch {
	case r.ProtoMajor != 1:
		s.writeError(w, r, errorStatus(http.StatusHTTPVersionNotSupported, "%s is not served: this service speaks HTTP/1.1", r.Proto))
	case fragment:
		s.writeError(w, r, errorStatus(http.StatusBadRequest, "the request target's path holds a '#': a URL's fragment is not sent; send the path and query alone, and a '#' in a path segment as %%23"))
	case badAuthority:
		s.writeError(w, r, errorStatus(http.StatusBadRequest, "the request target is not an http or https URL with a host and no user information: send the path alone, with the Host header"))
	case r.Host == "":
		s.writeError(w, r, errorStatus(http.StatusBadRequest, "the Host header is empty: name the host and port the request is sent to"))
	case absolute:
		s.writeError(w, r, errorStatus(http.StatusBadRequest,
			"the request target's host %q is not a host name or address with an optional port", r.Host))
	default:
		s.writeError(w, r, errorStatus(http.StatusBadRequest,
			"the Host header %q is not a host name or address with an optional port", r.Host))
	}
	return true
}

// asksServerOptions says whether r is "OPTIONS *" (serverOptions).
func asksServerOptions(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.RequestURI == "*"
}

// serverOptions answers "OPTIONS *", which asks what the server can do in
// general (RFC 9110, section 9.3.7), with the methods the API serves in
// Allow, and reports whether r was that. Without it the mux would answer
// 400, as to any other request for "*" (GET * still gets that, with the
// Error body). It needs no token: it says nothing a client could not learn
// from a 405's Allow.
//
// 200 with Content-Length: 0 rather than 204: it is what net/http answers
// by itself (its general OPTIONS handler, which NewHTTPServer turns off so
// that the request is logged and counted like any other), and RFC 7231
// (section 4.3.7) had a server send Content-Length: 0 with an empty
// answer to OPTIONS, which a 204 must not carry.
func serverOptions(w http.ResponseWriter, r *http.Request) bool {
	if !asksServerOptions(r) {
		return false
	}
	h := w.Header()
	h.Set("Allow", apiMethods)
	h.Set("Content-Length", "0")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return true
}
