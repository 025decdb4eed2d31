// Package apitest checks, in tests, that every answer of the service
// conforms to the OpenAPI document in api/, and records which documented
// answers the tests have seen, so a suite can prove it covered them all.
package apitest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/plantstore/plantstore/api"
)

// Contract is the loaded OpenAPI document.
type Contract struct {
	Doc         *openapi3.T
	router      routers.Router
	errorSchema *openapi3.Schema

	mu   sync.Mutex
	seen map[string]map[string]bool // by group (see GroupOf): "METHOD /template STATUS"
}

// GroupOf names the coverage group a test's responses count for, so that
// one test binary can prove coverage once per group (per storage engine,
// say); Unseen takes the group. By default every test is in group "". A
// test package sets it before its tests run.
var GroupOf = func(testing.TB) string { return "" }

var (
	loadOnce sync.Once
	loaded   *Contract
	loadErr  error
)

// Load parses and validates api/openapi.yaml, once per test binary.
func Load() (*Contract, error) {
	loadOnce.Do(func() { loaded, loadErr = Parse(api.YAML) })
	return loaded, loadErr
}

var registerDecoders sync.Once

// Parse parses and validates an OpenAPI document, in YAML or JSON: the
// embedded one, or one a running service served.
func Parse(doc []byte) (*Contract, error) {
	// The reference page and its script are text; their schemas say so.
	registerDecoders.Do(func() {
		openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
		openapi3filter.RegisterBodyDecoder("text/javascript", openapi3filter.PlainBodyDecoder)
		openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
	})
	loader := openapi3.NewLoader()
	parsed, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if err := parsed.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("not a valid OpenAPI document: %w", err)
	}
	// Route on paths alone, whatever host the test server has.
	routed := *parsed
	routed.Servers = openapi3.Servers{{URL: "/"}}
	router, err := gorillamux.NewRouter(&routed)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	errSchema := parsed.Components.Schemas["Error"]
	if errSchema == nil || errSchema.Value == nil {
		return nil, fmt.Errorf("the OpenAPI document has no Error schema")
	}
	return &Contract{Doc: parsed, router: router, errorSchema: errSchema.Value, seen: map[string]map[string]bool{}}, nil
}

// Check reports how resp, with its body already read, breaks the contract,
// or nil when it conforms. req is the request that produced it. The
// answer counts as seen in group "".
func (c *Contract) Check(req *http.Request, resp *http.Response, body []byte) error {
	return c.check("", req, resp, body)
}

func (c *Contract) check(group string, req *http.Request, resp *http.Response, body []byte) error {
	if resp.Header.Get("Content-Encoding") == "gzip" && req.Method != http.MethodHead {
		// The document describes the representation; a content coding
		// only wraps it (RFC 9110 section 8.4). An answer to HEAD has
		// none to unwrap.
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("Content-Encoding gzip, but the body is not gzip: %w", err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			return fmt.Errorf("Content-Encoding gzip, but the body does not decompress: %w", err)
		}
	}
	// 304 has no body by definition (RFC 9110 section 15.4.5): the one
	// exception to the Error body rule.
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotModified {
		if err := c.checkErrorBody(req, resp, body); err != nil {
			return err
		}
	}
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return c.checkUnrouted(req, resp)
	}
	c.mu.Lock()
	if c.seen[group] == nil {
		c.seen[group] = map[string]bool{}
	}
	c.seen[group][req.Method+" "+route.Path+" "+strconv.Itoa(resp.StatusCode)] = true
	c.mu.Unlock()
	if resp.Close && isProtocolRejection(resp.StatusCode) && route.Operation.Responses.Status(resp.StatusCode) == nil {
		return nil // refused before routing, as the document's description says
	}
	validated := req
	if req.Method == http.MethodHead {
		// kin-openapi checks nothing of an answer to HEAD; asked as if
		// for GET, but with the head operation's route, whose answers
		// have no content, it checks the status and the headers.
		validated = req.Clone(req.Context())
		validated.Method = http.MethodGet
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: validated, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
			AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		},
	}
	if err := openapi3filter.ValidateResponse(req.Context(), input); err != nil {
		return fmt.Errorf("response does not conform to the document: %w", err)
	}
	return nil
}

// checkErrorBody holds every non-2xx answer, documented or not, to the
// rule of the contract: an Error body whose error is the status.
func (c *Contract) checkErrorBody(req *http.Request, resp *http.Response, body []byte) error {
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("status %d with Content-Type %q, want application/json", resp.StatusCode, ct)
	}
	if req.Method == http.MethodHead {
		return nil
	}
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		return fmt.Errorf("status %d with a body that is not JSON: %q", resp.StatusCode, body)
	}
	if err := c.errorSchema.VisitJSON(value, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("status %d with a body that is not an Error: %q: %w", resp.StatusCode, body, err)
	}
	var e struct {
		Error   int    `json:"error"`
		Message string `json:"message"`
	}
	json.Unmarshal(body, &e)
	if e.Error != resp.StatusCode {
		return fmt.Errorf("status %d with an Error body whose error is %d", resp.StatusCode, e.Error)
	}
	if strings.TrimSpace(e.Message) == "" {
		return fmt.Errorf("status %d with an empty message", resp.StatusCode)
	}
	return nil
}

// checkUnrouted allows, for a request the document has no operation for,
// only 404, 405 with an Allow header naming the documented methods,
// a redirect to a canonical path, a CORS preflight or a protocol error.
// HEAD is documented wherever GET is, so it is routed like any method.
func (c *Contract) checkUnrouted(req *http.Request, resp *http.Response) error {
	// Escaped: /plants%2F1 is one segment, no path of the document's.
	methods := c.documentedMethods(req.URL.EscapedPath())
	switch {
	case resp.StatusCode == http.StatusMethodNotAllowed:
		if len(methods) == 0 {
			return fmt.Errorf("405 for %s, which the document does not have", req.URL.Path)
		}
		allow := strings.Split(resp.Header.Get("Allow"), ", ")
		for _, m := range methods {
			if !slices.Contains(allow, m) {
				return fmt.Errorf("405 with Allow %q, which lacks documented method %s", resp.Header.Get("Allow"), m)
			}
		}
		return nil
	case resp.StatusCode == http.StatusNotFound && len(methods) == 0:
		return nil
	case req.Method == http.MethodOptions && req.Header.Get("Access-Control-Request-Method") != "" &&
		resp.StatusCode == http.StatusNoContent && resp.Header.Get("Access-Control-Allow-Origin") != "" && len(methods) > 0:
		return nil // a CORS preflight, which the document's description covers for every path
	case resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.Header.Get("Location") != "":
		return nil
	case closes(resp) && isProtocolRejection(resp.StatusCode):
		return nil // refused before routing; the Error body was checked
	}
	return fmt.Errorf("%s %s answered %d but the document has no such operation", req.Method, req.URL.Path, resp.StatusCode)
}

// isProtocolRejection tells the statuses net/http answers, before any
// routing, to requests that are not valid HTTP/1.1.
// closes says whether an answer closes its connection: as a client reads
// it (Close), or as a handler's recorded answer says it (an
// httptest.ResponseRecorder's Result leaves Close false).
func closes(resp *http.Response) bool {
	return resp.Close || strings.EqualFold(resp.Header.Get("Connection"), "close")
}

func isProtocolRejection(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusExpectationFailed, http.StatusRequestHeaderFieldsTooLarge,
		http.StatusNotImplemented, http.StatusHTTPVersionNotSupported:
		return true
	}
	return false
}

// documentedMethods lists the methods the document has for a concrete
// path, matching templates segment by segment ({id} matches any segment).
func (c *Contract) documentedMethods(path string) []string {
	segments := strings.Split(path, "/")
	for template, item := range c.Doc.Paths.Map() {
		want := strings.Split(template, "/")
		if len(want) != len(segments) {
			continue
		}
		match := true
		for i, w := range want {
			if !(strings.HasPrefix(w, "{") && strings.HasSuffix(w, "}") && segments[i] != "") && w != segments[i] {
				match = false
				break
			}
		}
		if match {
			var methods []string
			for m := range item.Operations() {
				methods = append(methods, m)
			}
			slices.Sort(methods)
			return methods
		}
	}
	return nil
}

// Unseen lists the documented answers ("METHOD /path STATUS") that no
// checked response of group has had.
func (c *Contract) Unseen(group string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var unseen []string
	for path, item := range c.Doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				key := method + " " + path + " " + status
				if !c.seen[group][key] {
					unseen = append(unseen, key)
				}
			}
		}
	}
	slices.Sort(unseen)
	return unseen
}

// Transport is an http.RoundTripper that checks every response against the
// contract and fails the test on any breach. The body is left readable.
type Transport struct {
	T        testing.TB
	Contract *Contract
	Base     http.RoundTripper // default http.DefaultTransport
}

func (tr *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := tr.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := tr.Contract.check(GroupOf(tr.T), req, resp, body); err != nil {
		tr.T.Errorf("contract: %s %s: %v", req.Method, req.URL.Path, err)
	}
	return resp, nil
}

// Client returns an *http.Client whose every response is checked against
// the contract.
func Client(t testing.TB) *http.Client {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &Transport{T: t, Contract: c}}
}

// Served returns c with every response checked against the document the
// server at base serves (GET base/openapi.json, fetched through c), not
// the copy built into the tests; c's timeout and redirect policy are kept.
func Served(t testing.TB, c *http.Client, base string) *http.Client {
	t.Helper()
	resp, err := c.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/openapi.json: %d, %v", base, resp.StatusCode, err)
	}
	contract, err := Parse(doc)
	if err != nil {
		t.Fatalf("the served document: %v", err)
	}
	checked := *c
	checked.Transport = &Transport{T: t, Contract: contract, Base: c.Transport}
	return &checked
}

// CheckRaw checks a response read off a raw connection (for requests no
// http.Client would send).
func CheckRaw(t testing.TB, req *http.Request, resp *http.Response) []byte {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.check(GroupOf(t), req, resp, body); err != nil {
		t.Errorf("contract: %s %s: %v", req.Method, req.URL.Path, err)
	}
	return body
}
