// Package client is a Go client for the Plant Store API.
//
//	c, err := client.New("http://127.0.0.1:8080", os.Getenv("PLANTSTORE_TOKEN"))
//	p, err := c.Create(ctx, client.Plant{ID: 1, Name: "Monstera", Tag: client.Tag("tropical")})
//	for p, err := range c.All(ctx, client.ListOptions{}) { ... }
//
// Every method takes a context; each attempt is also bounded by
// DefaultTimeout unless WithHTTPClient gives a client of your own. A
// non-2xx answer comes back as an *Error carrying the status, the
// server's message, its Retry-After and its request id. WithRetries makes
// the client retry what the service refused for now (429, 503) and
// connections dropped before the answer; it does not by default.
// WithTLSConfig trusts a private CA. A redirect is followed only within
// the origin of the base URL: the token goes nowhere else.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Plant is a plant with its id. Tag is nil when the plant has none.
type Plant struct {
	ID   int64   `json:"id"`
	Name string  `json:"name"`
	Tag  *string `json:"tag,omitempty"`
}

// Tag returns a pointer to tag, for Plant literals.
func Tag(tag string) *string { return &tag }

// Error is a non-2xx answer of the service.
type Error struct {
	StatusCode int // the HTTP status
	// Message is the server's message: the Error body's, or, from
	// something else on the way (a proxy, a server that is not
	// plantstore), a short plain-text body as sent, else the status's text.
	// It is the server's text as it came: escape it before a terminal
	// shows it (a hostile server may send escape sequences or bidi
	// overrides; strconv.Quote escapes most), as the plantstore command
	// does.
	Message string
	// RetryAfter is how long the service asks the client to wait before
	// trying again (its Retry-After, which it sends with 429 and 503); 0
	// when it did not say.
	RetryAfter time.Duration
	// RequestID is the answer's X-Request-Id: the service's log has the
	// request under it (a 500's cause, say). Error quotes it for a 5xx.
	RequestID string
	// EarlierMayHaveTakenEffect is set when an earlier attempt of the
	// request ended without saying whether it took effect: its connection
	// dropped before the whole answer, or it got a 503 (which a write may
	// follow after it took effect). A Delete's 404 may then be that
	// attempt's success, its answer lost. A 429 was refused before
	// anything was done, and does not set it.
	EarlierMayHaveTakenEffect bool
}

func (e *Error) Error() string {
	if e.StatusCode >= 500 && e.RequestID != "" {
		return fmt.Sprintf("plantstore: %d: %s (request %s)", e.StatusCode, e.Message, e.RequestID)
	}
	return fmt.Sprintf("plantstore: %d: %s", e.StatusCode, e.Message)
}

// StatusCode returns the HTTP status of an *Error in err's chain, or 0.
func StatusCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// Client calls one Plant Store service with one token. It is safe for
// concurrent use. Make one with New: the zero value has no service to
// call.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
	retry RetryPolicy // retry.go
	tls   *tls.Config // tls.go
	// silence is how long a followed stream may say nothing (events.go).
	silence time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the *http.Client requests go through (default: one
// on http.DefaultTransport whose Timeout is DefaultTimeout). New keeps a
// copy of it, with a CheckRedirect that keeps the token on the base URL's
// origin: later changes to h are not seen. Its Timeout bounds each
// attempt of a request (0: none, ctx alone); an event stream ignores it
// (see Events).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// DefaultTimeout bounds each attempt of a request of a client made
// without WithHTTPClient, answer included: a server or proxy that accepts
// the connection and never answers fails the call rather than hanging it.
// The service gives up on a request after its --request-timeout (10 s by
// default), so an attempt that takes longer has lost its server.
const DefaultTimeout = 30 * time.Second

// defaultHTTP is the *http.Client of a client made without WithHTTPClient.
var defaultHTTP = &http.Client{Timeout: DefaultTimeout}

// userAgent names the client in the service's and proxies' logs.
const userAgent = "plantstore-go-client"

// New returns a Client for the service at baseURL (which may carry a path
// prefix, but no query) that sends token as a bearer credential. It
// refuses a token no service could take (ErrToken) rather than let every
// call fail with 401.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("plantstore: base URL %q must be an absolute http(s) URL, such as http://127.0.0.1:8080", baseURL)
	}
	// Each call sets its own query; one in the base URL would be dropped
	// without a word.
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		// Shown without them: a query may hold a secret, and a # in a
		// password makes the rest of it a fragment.
		shown := *u
		shown.RawQuery, shown.ForceQuery, shown.Fragment, shown.RawFragment = "", false, "", ""
		return nil, fmt.Errorf("plantstore: base URL %q (shown without them) must not have a query or a fragment: the client adds each call's own (a # or ? in a password is written %%23 or %%3F)", shown.Redacted())
	}
	if err := checkToken(token); err != nil {
		return nil, err
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, token: token, http: defaultHTTP}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		c.http = defaultHTTP // WithHTTPClient(nil)
	}
	if err := c.applyTLS(); err != nil {
		return nil, err
	}
	c.keepTokenAtHome()
	return c, nil
}

// ErrToken is what New's error wraps when the token is empty (an unset
// PLANTSTORE_TOKEN) or holds a control character (a newline read from a
// file along with it), which net/http would refuse at every call without
// saying why. Spaces at either end are let through: the service ignores
// them.
var ErrToken = errors.New("plantstore: unusable token")

// checkToken returns an ErrToken for a token no service could take. The
// error does not quote the token.
func checkToken(token string) error {
	if strings.Trim(token, " ") == "" {
		return fmt.Errorf("%w: it is empty (plantstore token create makes one)", ErrToken)
	}
	if i := strings.IndexFunc(token, func(r rune) bool { return r < ' ' || r == 0x7f }); i >= 0 {
		return fmt.Errorf("%w: it has a control character at byte %d (a newline read from a file with it?)", ErrToken, i)
	}
	return nil
}

// keepTokenAtHome has c's requests follow a redirect only within the
// origin they were sent to. net/http would send the token along to
// another port or scheme of the same host (https to http: in clear) and
// to its subdomains; the service itself redirects only to its own paths.
// A CheckRedirect of the caller's client still runs after this check.
func (c *Client) keepTokenAtHome() {
	h := *c.http
	theirs := h.CheckRedirect
	h.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		from := via[0].URL
		if req.URL.Scheme != from.Scheme || req.URL.Host != from.Host {
			return &redirectRefused{from: via[len(via)-1].URL, to: req.URL}
		}
		if theirs != nil {
			return theirs(req, via)
		}
		if len(via) >= 10 {
			return errTooManyRedirects
		}
		return nil
	}
	c.http = &h
}

// redirectRefused is a redirect off the base URL's origin, not followed.
// It is typed so that Events can tell it from a broken connection:
// asking again gets the same redirect.
type redirectRefused struct{ from, to *url.URL }

func (e *redirectRefused) Error() string {
	return fmt.Sprintf("plantstore: not following a redirect from %s to %s: the token is not sent to another origin than %s://%s",
		e.from.Redacted(), e.to.Redacted(), e.from.Scheme, e.from.Host)
}

// errTooManyRedirects is net/http's default limit, which our
// CheckRedirect replaces.
var errTooManyRedirects = errors.New("plantstore: stopped after 10 redirects")

// Create adds p. It succeeds too when a plant with p's id, name and tag
// exists already (an idempotent replay), so a lost answer can be retried.
// Another plant under the id is a 409 *Error.
func (c *Client) Create(ctx context.Context, p Plant) (Plant, error) {
	var got Plant // the service answers the Plant without its id
	// A replay of the same create answers 200 again, so it may be retried.
	if err := c.send(ctx, request{method: http.MethodPost, target: c.url("/plants", nil), body: p, out: &got, replay: true}); err != nil {
		return Plant{}, err
	}
	got.ID = p.ID
	if err := checkPlant(http.MethodPost, "/plants", got, p.ID); err != nil {
		return Plant{}, err
	}
	return got, nil
}

// checkPlant refuses a 2xx answer that is not the plant asked for. The
// service's always has the plant's name, never empty, and its id when it
// names one is the one asked for: anything else (null, {}, another plant)
// is not its answer, a --server of another JSON service say, and must
// not pass for a plant.
func checkPlant(method, path string, got Plant, id int64) error {
	if got.Name == "" || got.ID != 0 && got.ID != id {
		return fmt.Errorf("plantstore: %s %s: malformed answer: not the plant %d", method, path, id)
	}
	return nil
}

// Get reads the plant with id; a missing one is a 404 *Error.
func (c *Client) Get(ctx context.Context, id int64) (Plant, error) {
	p, _, err := c.GetETag(ctx, id)
	return p, err
}

// GetETag reads the plant with id and its ETag, which changes whenever
// the plant does: pass it to UpdateIf or DeleteIf to change the plant only
// if no one else has since.
func (c *Client) GetETag(ctx context.Context, id int64) (Plant, string, error) {
	var p Plant
	var h http.Header
	path := "/plants/" + strconv.FormatInt(id, 10)
	err := c.send(ctx, request{method: http.MethodGet, target: c.url(path, nil), out: &p, header: &h})
	if p.ID == 0 {
		p.ID = id // an answer may leave it out, as the contract's Plant does
	}
	if err == nil {
		err = checkPlant(http.MethodGet, path, p, id)
	}
	if err != nil {
		return Plant{}, "", err
	}
	return p, h.Get("ETag"), nil
}

// Update replaces the name and tag of the plant with p.ID: the plant
// becomes exactly p, so a nil Tag removes its tag. A missing plant is a
// 404 *Error.
func (c *Client) Update(ctx context.Context, p Plant) (Plant, error) {
	got, _, err := c.UpdateIf(ctx, p, "")
	return got, err
}

// UpdateIf is Update only while the plant still has etag (from GetETag or
// an earlier UpdateIf; "*": while it exists): otherwise nothing changes
// and the error is a 412 *Error. A missing plant is a 404 *Error, as for
// Update. An empty etag makes it Update. It returns the plant's new ETag.
func (c *Client) UpdateIf(ctx context.Context, p Plant, etag string) (Plant, string, error) {
	var got Plant
	var h http.Header
	path := "/plants/" + strconv.FormatInt(p.ID, 10)
	err := c.send(ctx, request{method: http.MethodPut, target: c.url(path, nil),
		body: p, out: &got, header: &h, ifMatch: etag})
	if got.ID == 0 {
		got.ID = p.ID
	}
	if err == nil {
		err = checkPlant(http.MethodPut, path, got, p.ID)
	}
	if err != nil {
		return Plant{}, "", err
	}
	return got, h.Get("ETag"), nil
}

// Delete removes the plant with id; a missing one is a 404 *Error.
func (c *Client) Delete(ctx context.Context, id int64) error { return c.DeleteIf(ctx, id, "") }

// DeleteIf is Delete only while the plant still has etag ("*": while it
// exists); otherwise nothing changes and the error is a 412 *Error. A
// missing plant is a 404 *Error, as for Delete.
func (c *Client) DeleteIf(ctx context.Context, id int64, etag string) error {
	return c.send(ctx, request{method: http.MethodDelete, target: c.url("/plants/"+strconv.FormatInt(id, 10), nil), ifMatch: etag})
}

// ListOptions select plants to list. The zero value lists all, 100 a page.
type ListOptions struct {
	Limit int     // plants per page, 1 to 1000; 0 means the server's default
	After *int64  // only plants with a greater id
	Tag   *string // only plants with exactly this tag
}

// Page is one page of a listing.
type Page struct {
	Plants []Plant
	// Next is the URL of the next page, "" on the last one.
	Next string
}

// List reads the first page that opts select. Follow Page.Next with
// ListNext, or use All.
func (c *Client) List(ctx context.Context, opts ListOptions) (Page, error) {
	return c.ListNext(ctx, c.listURL(opts))
}

// listURL is the URL of the first page that opts select.
func (c *Client) listURL(opts ListOptions) string {
	q := url.Values{}
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.After != nil {
		q.Set("after", strconv.FormatInt(*opts.After, 10))
	}
	if opts.Tag != nil {
		q.Set("tag", *opts.Tag)
	}
	return c.url("/plants", q)
}

// ListNext reads the page at next, a Page.Next. It refuses a URL on
// another scheme or host than the client's base URL. (A Page.Next is
// always on it: the next page of a server that names its pages under a
// public URL the client does not use is taken on the client's base URL.)
func (c *Client) ListNext(ctx context.Context, next string) (Page, error) {
	if err := c.checkOwn(next); err != nil {
		return Page{}, err
	}
	var page Page
	var header http.Header
	if err := c.do(ctx, http.MethodGet, next, nil, &page.Plants, &header); err != nil {
		return Page{}, err
	}
	var err error
	page.Next, err = c.nextPage(next, header)
	return page, err
}

// checkOwn refuses a URL on another scheme or host than the client's base
// URL: the token goes with every request.
func (c *Client) checkOwn(target string) error {
	if u, err := url.Parse(target); err != nil || u.Scheme != c.base.Scheme || u.Host != c.base.Host {
		return fmt.Errorf("plantstore: %q is not on %s://%s", target, c.base.Scheme, c.base.Host)
	}
	return nil
}

// nextPage resolves the rel="next" Link of the answer to the page at
// current: "" when there is none.
func (c *Client) nextPage(current string, header http.Header) (string, error) {
	link := nextLink(header.Values("Link"))
	if link == "" {
		return "", nil
	}
	ref, err := url.Parse(link)
	if err != nil {
		return "", fmt.Errorf("plantstore: malformed Link %q: %w", link, err)
	}
	base, _ := url.Parse(current)
	resolved := base.ResolveReference(ref)
	// The next page is the same resource with the link's query, on the
	// client's base URL: a server behind a proxy names it under its
	// public URL (--public-url), which a client of its own address (an
	// operator on the host) does not reach, and a proxy that adds a path
	// prefix the server cannot see has the server link it without that
	// prefix. The token goes with every request: a link to another
	// resource is followed only on the client's own origin.
	if path.Base(resolved.Path) == path.Base(base.Path) {
		rebased := *base
		rebased.RawQuery = resolved.RawQuery
		return rebased.String(), nil
	}
	if resolved.Scheme == c.base.Scheme && resolved.Host == c.base.Host {
		return resolved.String(), nil
	}
	return "", fmt.Errorf("plantstore: the next page %q is not on %s://%s; not following it", link, c.base.Scheme, c.base.Host)
}

// All yields every plant opts select, in id order, reading page after
// page. It stops at the first error, which it yields. A next page that
// would not move on, as a server that keeps to the API never sends, is
// an error too, rather than a loop that reads the same pages forever: a
// page with a next link but no plants, a next link that is the page
// itself or starts before the last plant read (its after), or a plant
// that is not after the last one read.
func (c *Client) All(ctx context.Context, opts ListOptions) iter.Seq2[Plant, error] {
	return func(yield func(Plant, error) bool) {
		current := c.listURL(opts)
		page, err := c.ListNext(ctx, current)
		var last *int64 // the id of the last plant yielded
		for {
			if err != nil {
				yield(Plant{}, err)
				return
			}
			for _, p := range page.Plants {
				if last != nil && p.ID <= *last {
					yield(Plant{}, fmt.Errorf("plantstore: the server sent plant %d after plant %d (%s); not going on, as it would read plants again", p.ID, *last, current))
					return
				}
				if !yield(p, nil) {
					return
				}
				last = &p.ID
			}
			if page.Next == "" {
				return
			}
			if err := stalled(current, page, last); err != nil {
				yield(Plant{}, err)
				return
			}
			current = page.Next
			page, err = c.ListNext(ctx, current)
		}
	}
}

// stalled says why All must not follow page's next link, read at current
// after the plant with id *last (nil before any): the link would not move
// past what was read, so following it could read the same pages forever.
// A link without a numeric after is judged by the first two tests alone.
func stalled(current string, page Page, last *int64) error {
	switch {
	case len(page.Plants) == 0:
		return fmt.Errorf("plantstore: the server sent a page of no plants (%s) with a next page (%s); not following it, as it may never end", current, page.Next)
	case page.Next == current:
		return fmt.Errorf("plantstore: the server sent a page (%s) whose next page is itself; not following it, as it would never end", current)
	}
	next, err := url.Parse(page.Next)
	if err != nil {
		return nil // nextPage resolved it: cannot happen
	}
	if after, err := strconv.ParseInt(next.Query().Get("after"), 10, 64); err == nil && after < *last {
		return fmt.Errorf("plantstore: the server's next page (%s) starts after plant %d, not after %d, the last read; not following it, as it would read plants again", page.Next, after, *last)
	}
	return nil
}

func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	return u.String()
}

// request is one call to the service.
type request struct {
	method, target string
	body           any          // sent as JSON when not nil
	out            any          // a 2xx answer's body is decoded into it when not nil
	header         *http.Header // a 2xx answer's headers, when not nil
	ifMatch        string       // the If-Match header, when not empty
	replay         bool         // a POST that may be sent again (a create): see RetryPolicy
}

// do sends one request with body as JSON, decodes a 2xx answer into out
// (when not nil) and its headers into header (when not nil), and turns
// any other answer into an *Error.
func (c *Client) do(ctx context.Context, method, target string, body, out any, header *http.Header) error {
	return c.send(ctx, request{method: method, target: target, body: body, out: out, header: header})
}

// sendOnce makes one attempt at r; send (retry.go) repeats it as the
// client's RetryPolicy allows.
func (c *Client) sendOnce(ctx context.Context, r request) error {
	var reader io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.target, reader)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.ifMatch != "" {
		req.Header.Set("If-Match", r.ifMatch)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	failed := resp.StatusCode < 200 || resp.StatusCode > 299
	limit := int64(maxAnswerBytes)
	if failed {
		limit = maxErrorBytes
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		// Cut short (the connection lost, ctx ended): said with the
		// request, the cause kept for errors.Is and the retries.
		return fmt.Errorf("plantstore: %s %s: reading the answer: %w", r.method, req.URL.Path, err)
	}
	if int64(len(data)) > limit {
		if !failed {
			return fmt.Errorf("plantstore: %s %s: malformed answer: larger than %d MiB, more than any answer of the API", r.method, req.URL.Path, maxAnswerBytes>>20)
		}
		data = nil // not the Error body: the status says it
	}
	if failed {
		e := errorOf(resp.StatusCode, data)
		e.RetryAfter = retryAfter(resp.Header, time.Now())
		e.RequestID = resp.Header.Get("X-Request-Id")
		return e
	}
	if r.header != nil {
		*r.header = resp.Header
	}
	if r.out != nil {
		if err := json.Unmarshal(data, r.out); err != nil {
			return fmt.Errorf("plantstore: %s %s: malformed answer: %w", r.method, req.URL.Path, err)
		}
	}
	return nil
}

// Bounds on what an answer's body may cost the client. The largest of
// the API's answers, a page of 1000 plants with the longest names and
// tags, all escaped, is under 2 MiB; an Error body is a line. A body over
// its bound (a proxy's, a server's not plantstore) is not read further.
const (
	maxAnswerBytes = 8 << 20
	maxErrorBytes  = 64 << 10
)

// errorOf is the *Error of a non-2xx answer with body data.
func errorOf(status int, data []byte) *Error {
	e := &Error{StatusCode: status}
	var decoded struct {
		Message string `json:"message"`
	}
	switch {
	case json.Unmarshal(data, &decoded) == nil && decoded.Message != "":
		e.Message = decoded.Message
	case plainMessage(data):
		e.Message = strings.Join(strings.Fields(string(data)), " ")
	default:
		e.Message = http.StatusText(status)
	}
	return e
}

// plainMessage reports whether a body that is not the Error JSON reads as
// a message worth showing: short printable text, not markup (a proxy's
// error page) nor JSON of another shape. Go's own TLS server, asked in
// plain HTTP, says "Client sent an HTTP request to an HTTPS server."
func plainMessage(data []byte) bool {
	text := bytes.TrimSpace(data)
	if len(text) == 0 || len(text) > 300 || !utf8.Valid(text) || text[0] == '<' || text[0] == '{' || text[0] == '[' {
		return false
	}
	for _, r := range string(text) {
		if unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
	}
	return true
}

// nextLink finds the target of rel="next" in Link header values (RFC
// 8288): comma-separated "<target>; param=value" entries.
func nextLink(values []string) string {
	for _, v := range values {
		for v != "" {
			v = strings.TrimLeft(v, " ,")
			if !strings.HasPrefix(v, "<") {
				return ""
			}
			end := strings.IndexByte(v, '>')
			if end < 0 {
				return ""
			}
			target := v[1:end]
			params, rest, _ := strings.Cut(v[end+1:], ",")
			v = rest
			for param := range strings.SplitSeq(params, ";") {
				name, value, _ := strings.Cut(strings.TrimSpace(param), "=")
				if strings.EqualFold(name, "rel") && relHasNext(strings.Trim(value, `"`)) {
					return target
				}
			}
		}
	}
	return ""
}

func relHasNext(rel string) bool {
	for r := range strings.FieldsSeq(rel) {
		if strings.EqualFold(r, "next") {
			return true
		}
	}
	return false
}
