package httpapi

import (
	"bufio"
	"bytes"
	"context"
	stdjson "encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/apitest"
	"github.com/plantstore/plantstore/internal/auth"
	"github.com/plantstore/plantstore/internal/sqlite"
)

// Fuzz targets for the two places hostile input enters: a create's body,
// and the whole handler. Both hold what they see to readings made without
// the code under test (other JSON parsers, math/big, the contract), so a
// bug the decoder and its check share cannot hide. Plain `go test` runs
// their seeds and testdata/fuzz as regression tests.

// nastyBodies are create bodies of the kinds that have broken JSON decoders
// elsewhere. Each must get a plant or a 4xx, never a 5xx or a panic.
func nastyBodies() []string {
	return []string{
		`{"id":1,"name":"Monstera deliciosa","tag":"tropical"}`,
		`{"tag":"","name":"Fern","id":2,"other":{"a":[1,null,true]}}`,
		// Duplicate names, also through escapes and in skipped members.
		`{"id":1,"name":"a","name":"b"}`,
		`{"id":1,"name":"a","n\u0061me":"b"}`,
		`{"id":1,"id":2,"name":"a"}`,
		`{"id":1,"name":"a","tag":"x","tag":"y"}`,
		`{"id":1,"name":"a","x":{"k":1,"k":2}}`,
		`{"ID":1,"Name":"a","id":3,"name":"b"}`,
		// Nesting in a skipped member; bigBodies go to jsontext's limit.
		nested("[", "]", 300),
		nested(`{"a":`, "}", 300),
		nested(`[{"a":`, "}]", 150),
		strings.Repeat("[", 300),
		// Numbers: out of range, integral in other spellings, not integers.
		`{"id":1e400,"name":"a"}`,
		`{"id":9223372036854775807,"name":"max"}`,
		`{"id":9223372036854775808,"name":"a"}`,
		`{"id":-9223372036854775808,"name":"min"}`,
		`{"id":-9223372036854775809,"name":"a"}`,
		`{"id":1.0,"name":"a"}`,
		`{"id":1e2,"name":"a"}`,
		`{"id":1E+2,"name":"a"}`,
		`{"id":100000000000000000000e-20,"name":"a"}`,
		`{"id":0e99999999999,"name":"a"}`,
		`{"id":1e-99999999999,"name":"a"}`,
		`{"id":-0,"name":"a"}`,
		`{"id":1.5,"name":"a"}`,
		`{"id":"0x10","name":"a"}`,
		`{"id":0x10,"name":"a"}`,
		`{"id":007,"name":"a"}`,
		`{"id":+1,"name":"a"}`,
		`{"id":NaN,"name":"a"}`,
		`{"id":null,"name":"a"}`,
		`{"id":true,"name":"a"}`,
		`{"id":[1],"name":"a"}`,
		// Strings: bad UTF-8, NUL, surrogates, overlong forms, controls.
		"{\"id\":1,\"name\":\"a\xff\"}",
		"{\"id\":1,\"name\":\"\xc0\xaf\"}",
		"{\"id\":1,\"name\":\"\xed\xa0\x80\"}",
		"{\"id\":1,\"name\":\"a\x00b\"}",
		"{\"id\":1,\"name\":\"a\",\"x\":\"\xc3\"}",
		"{\"id\":1,\"name\":\"a\"}\x00",
		`{"id":1,"name":"a\u0000b"}`,
		`{"id":1,"name":"\ud800"}`,
		`{"id":1,"name":"\udc00\ud800"}`,
		`{"id":1,"name":"\ud83c\udf3f"}`,
		`{"id":1,"name":"tab\there"}`,
		`{"id":1,"name":"del\u007f"}`,
		`{"id":1,"name":"c1\u0085"}`,
		`{"id":1,"name":"line\u2028sep\ufeff"}`,
		`{"id":1,"name":"a","tag":"\u001b[31m"}`,
		`{"id":1,"name":"","tag":""}`,
		`{"id":1,"name":"a","tag":null}`,
		`{"id":1,"name":null}`,
		`{"id":1,"name":5}`,
		// Lengths at and past the limits, in code points, not bytes.
		`{"id":1,"name":"` + strings.Repeat("é", plantstore.MaxNameLength) + `"}`,
		`{"id":1,"name":"` + strings.Repeat("é", plantstore.MaxNameLength+1) + `"}`,
		`{"id":1,"name":"` + strings.Repeat("🌿", plantstore.MaxNameLength) + `"}`,
		`{"id":1,"name":"a","tag":"` + strings.Repeat("x", plantstore.MaxTagLength) + `"}`,
		`{"id":1,"name":"a","tag":"` + strings.Repeat("x", plantstore.MaxTagLength+1) + `"}`,
		// Framing: BOM, two values, trailing garbage, nothing, not an object.
		"\xef\xbb\xbf{\"id\":1,\"name\":\"a\"}",
		`{"id":1,"name":"a"} {"id":2,"name":"b"}`,
		`{"id":1,"name":"a"}{}`,
		`{"id":1,"name":"a"}x`,
		`{"id":1,"name":"a"},`,
		`{"id":1,"name":"a"`,
		`{"id":1,"name":"a",}`,
		" \r\n\t{\"id\":1,\"name\":\"a\"}\r\n",
		"",
		"   ",
		"null",
		"[]",
		`"name"`,
		"{}",
		`{"id":1}`,
		`{"name":"a"}`,
	}
}

// bigBodies are nasty bodies of many kilobytes: nesting at jsontext's
// depth limit of 10,000 and past it, and a body past the size limit.
func bigBodies() []string {
	return []string{
		nested("[", "]", 9_998),
		nested("[", "]", 10_001),
		nested(`{"a":`, "}", 9_998),
		nested(`{"a":`, "}", 10_001),
		strings.Repeat("[", 100_000),
		`{"id":1,"name":"a","pad":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`,
	}
}

// nested is a create whose skipped member x nests depth levels deep.
func nested(open, close string, depth int) string {
	return `{"id":1,"name":"Deep","x":` + strings.Repeat(open, depth) + "1" + strings.Repeat(close, depth) + "}"
}

// seedBodies are the bodies to seed a target with. When inputs are being
// mutated (-fuzz), the big ones are left to plain test runs: the fuzzer
// minimizes every input that finds new code for up to -fuzzminimizetime
// (a minute by default), and on one of tens of kilobytes that stalls it.
func seedBodies() []string {
	if flag.Lookup("test.fuzz").Value.String() != "" {
		return nastyBodies()
	}
	return append(nastyBodies(), bigBodies()...)
}

// nastyContentTypes are Content-Type values for a create; only JSON in
// UTF-8 may pass.
func nastyContentTypes() []string {
	return []string{
		"application/json",
		"application/json; charset=utf-8",
		"APPLICATION/JSON;CHARSET=UTF-8",
		`application/json; charset="utf-8"`,
		"",
		"text/plain",
		"application/json; charset=latin1",
		"application/json; charset=utf-16",
		"multipart/form-data; boundary=x",
		"application/x-www-form-urlencoded",
		"application/json, text/plain",
		"application/json;",
		"application/json; charset",
		"application/jsonx",
		"a/b/c",
		strings.Repeat("x", 99) + "é/json",
		"application/json; charset=" + strings.Repeat("x", 39) + "é",
		"application/\xff",
	}
}

// decodeCreate takes body through the steps handleCreatePlant takes before
// it stores: media type and size, decoding, validation.
func decodeCreate(s *Server, contentType string, body []byte) (plantstore.Plant, error) {
	r := httptest.NewRequest(http.MethodPost, "/plants", bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	b, err := s.readJSONBody(httptest.NewRecorder(), r, nil)
	if err != nil {
		return plantstore.Plant{}, err
	}
	p, err := decodeNewPlant(b)
	if err == nil {
		err = p.Validate()
	}
	return p, err
}

// FuzzDecodeNewPlant checks that a create's body either becomes exactly
// the plant an independent reading of the contract finds in it, which
// survives being encoded and read again, or is refused with a 400, 413 or
// 415 whose Error body can be written.
func FuzzDecodeNewPlant(f *testing.F) {
	for _, body := range seedBodies() {
		f.Add("application/json", []byte(body))
	}
	for _, ct := range nastyContentTypes() {
		f.Add(ct, []byte(`{"id":1,"name":"Fern"}`))
	}

	s := NewServer(nil, nil, Config{}) // reading a body needs neither store nor tokens
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		p, err := decodeCreate(s, contentType, body)
		if err != nil {
			status, message := statusOf(err)
			if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge && status != http.StatusUnsupportedMediaType {
				t.Fatalf("refused with %d (%v), want 400, 413 or 415", status, err)
			}
			checkErrorMessage(t, status, message)
			if status == http.StatusBadRequest {
				if want, ok := referenceNewPlant(body); ok {
					t.Fatalf("refused %q (%v), but it is a valid NewPlant: %v", body, err, want)
				}
			}
			return
		}
		checkText(t, "name", p.Name, 1, plantstore.MaxNameLength)
		if p.Tag != nil {
			checkText(t, "tag", *p.Tag, 0, plantstore.MaxTagLength)
		}
		if want, ok := referenceNewPlant(body); !ok || !want.SameContent(p) {
			t.Fatalf("read %q as %v; the reference reading is %v (valid: %v)", body, p, want, ok)
		}
		encoded, err := json.Marshal(storedPlant(p))
		if err != nil {
			t.Fatalf("%v does not encode: %v", p, err)
		}
		again, err := decodeCreate(s, "application/json", encoded)
		if err != nil || !again.SameContent(p) {
			t.Fatalf("round trip: %v encodes as %s, which reads back as %v, %v", p, encoded, again, err)
		}
	})
}

// checkErrorMessage fails unless message makes an Error body writeJSON can
// write: otherwise the client would get a 500 in its place.
func checkErrorMessage(t *testing.T, status int, message string) {
	t.Helper()
	if strings.TrimSpace(message) == "" {
		t.Fatalf("%d with an empty message", status)
	}
	if _, err := json.Marshal(errorBody{Error: int32(status), Message: message}); err != nil {
		t.Fatalf("%d with a message that cannot be encoded, so the answer would be a 500: %q: %v", status, message, err)
	}
}

// checkText applies the contract's rules for name and tag, written out
// again rather than calling Validate.
func checkText(t *testing.T, field, s string, minLen, maxLen int) {
	t.Helper()
	if err := textRules(s, minLen, maxLen); err != nil {
		t.Fatalf("accepted %s %q: %v", field, s, err)
	}
}

func textRules(s string, minLen, maxLen int) error {
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		return fmt.Errorf("control character at byte %d", i)
	}
	if n := utf8.RuneCountInString(s); n < minLen || n > maxLen {
		return fmt.Errorf("%d code points, want %d to %d", n, minLen, maxLen)
	}
	return nil
}

// referenceNewPlant reads body as the contract defines a NewPlant, with
// other parsers than decodeNewPlant: jsontext's validator for the syntax
// (RFC 7493: one value, valid UTF-8, no duplicate names), encoding/json for
// the members and math/big for the id.
func referenceNewPlant(body []byte) (plantstore.Plant, bool) {
	if !jsontext.Value(body).IsValid() {
		return plantstore.Plant{}, false
	}
	var members map[string]stdjson.RawMessage
	if err := stdjson.Unmarshal(body, &members); err != nil {
		return plantstore.Plant{}, false
	}
	var p plantstore.Plant
	id, ok := members["id"]
	if !ok || len(id) == 0 || (id[0] != '-' && (id[0] < '0' || id[0] > '9')) {
		return p, false
	}
	if p.ID, ok = exactInt64(string(id)); !ok {
		return p, false
	}
	name, ok := members["name"]
	if !ok || name[0] != '"' || stdjson.Unmarshal(name, &p.Name) != nil || textRules(p.Name, 1, plantstore.MaxNameLength) != nil {
		return p, false
	}
	if tag, ok := members["tag"]; ok {
		p.Tag = new(string)
		if tag[0] != '"' || stdjson.Unmarshal(tag, p.Tag) != nil || textRules(*p.Tag, 0, plantstore.MaxTagLength) != nil {
			return p, false
		}
	}
	return p, true
}

// exactInt64 is the value of a JSON number when that is an integer in
// int64 range, computed exactly.
func exactInt64(num string) (int64, bool) {
	mantissa, exponent, _ := strings.Cut(strings.ToLower(num), "e")
	if e, err := strconv.Atoi(exponent); exponent != "" && (err != nil || e > 100_000 || e < -100_000) {
		// A body within the size limit has too few digits to make such a
		// number an integer in range, unless it is zero.
		return 0, strings.Trim(mantissa, "-0.") == ""
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return 0, false
	}
	return r.Num().Int64(), true
}

// fuzzServer is one API over one SQLite file for a whole fuzzing run, so
// plants pile up across inputs as they would on a real service.
type fuzzServer struct {
	api      *Server
	db       *sqlite.DB
	token    string // plants:read and plants:write
	contract *apitest.Contract
	log      *lastLog
}

func newFuzzServer(f *testing.F) *fuzzServer {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(f.TempDir(), "plants.db"), sqlite.Options{SoleServer: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	token := plantstore.NewToken()
	if _, err := db.CreateToken(ctx, plantstore.Token{Name: "fuzz", Scopes: plantstore.KnownScopes}, plantstore.HashToken(token)); err != nil {
		f.Fatal(err)
	}
	contract, err := apitest.Load()
	if err != nil {
		f.Fatal(err)
	}
	log := &lastLog{}
	api := NewServer(db, auth.New(db, auth.Options{}), Config{Logger: slog.New(slog.NewTextHandler(log, nil))})
	return &fuzzServer{api: api, db: db, token: token, contract: contract, log: log}
}

// lastLog keeps what the server logged for the current input, to explain
// a failure.
type lastLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lastLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lastLog) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.buf.String()
	l.buf.Reset()
	return s
}

// FuzzHandler sends any method, target, headers and body, with or without
// a valid token, through the whole handler, and checks the answer: a real
// status, never a 5xx, the contract's Error body on every non-2xx, a
// challenge with every 401, no change to any plant the request named when
// it is refused, and the plant really stored, changed or gone when it is
// not. Headers are lines of "Name: value".
func FuzzHandler(f *testing.F) {
	const jsonType = "Content-Type: application/json"
	// Each body gets its own id: refused on content alone, it must leave
	// that id free; sharing an id, all but the first would be conflicts.
	for i, body := range seedBodies() {
		body = strings.Replace(body, `"id":1,`, fmt.Sprintf(`"id":%d,`, 1000+i), 1)
		f.Add("POST", "/plants", jsonType, []byte(body), true)
	}
	for _, ct := range nastyContentTypes() {
		f.Add("POST", "/plants", "Content-Type: "+ct, []byte(`{"id":3,"name":"Aloe"}`), true)
	}
	for _, tc := range []struct {
		method, target, headers, body string
		withToken                     bool
	}{
		{"POST", "/plants", jsonType, `{"id":4,"name":"Ivy"}`, false},
		{"GET", "/plants", "", "", false},
		{"HEAD", "/plants", "", "", false},
		{"GET", "/plants/4", "", "", false},
		{"PUT", "/plants/4", jsonType, `{"name":"Ivy"}`, false},
		{"DELETE", "/plants/4", "", "", false},
		{"GET", "/plants", "Authorization: Basic Zm9vOmJhcg==", "", false},
		{"GET", "/plants", "Authorization: Bearer", "", false},
		{"GET", "/plants", "Authorization: bearer not-a-token", "", false},
		{"GET", "/plants", "Authorization: Bearer x\nAuthorization: Bearer y", "", false},
		{"GET", "/plants", "Authorization: Bearer x", "", true},
		{"GET", "/plants", "", "", true},
		{"HEAD", "/plants", "", "", true},
		{"GET", "/plants?limit=1", "", "", true},
		{"GET", "/plants?limit=1000&after=-9223372036854775808", "", "", true},
		{"GET", "/plants?after=9223372036854775807", "", "", true},
		{"GET", "/plants?limit=-1", "", "", true},
		{"GET", "/plants?limit=0", "", "", true},
		{"GET", "/plants?limit=1001", "", "", true},
		{"GET", "/plants?limit=1e2", "", "", true},
		{"GET", "/plants?limit=1&limit=2", "", "", true},
		{"GET", "/plants?after=x", "", "", true},
		{"GET", "/plants?after=9223372036854775808", "", "", true},
		{"GET", "/plants?tag=tropical", "", "", true},
		{"GET", "/plants?tag=%FF", "", "", true},
		{"GET", "/plants?tag=%00", "", "", true},
		{"GET", "/plants?tag=%zz", "", "", true},
		{"GET", "/plants?a;b", "", "", true},
		{"GET", "/plants/", "", "", true},
		{"GET", "/plants/1", "", "", true},
		{"GET", "/plants/-9223372036854775808", "", "", true},
		{"GET", "/plants/abc", "", "", true},
		{"GET", "/plants/9223372036854775808", "", "", true},
		{"GET", "/plants/-9223372036854775809", "", "", true},
		{"GET", "/plants/1.0", "", "", true},
		{"GET", "/plants/%31", "", "", true},
		{"GET", "/plants/%2F1", "", "", true},
		{"GET", "/plants%2F1", "", "", true},
		{"PATCH", "/plants%2f1", "", "", true},
		{"GET", "/plants/1/leaves", "", "", true},
		{"GET", "/PLANTS", "", "", true},
		{"GET", "//plants", "", "", true},
		{"GET", "/./plants", "", "", true},
		{"GET", "/plants/../plants/1", "", "", true},
		{"GET", "/%FF", "", "", true},
		{"GET", "/" + strings.Repeat("é", 150), "", "", true}, // cut mid-rune at 200 bytes in a message
		{"PATCH", "/%FF", "", "", true},
		{"GET", "/healthz", "", "", false},
		{"GET", "/readyz", "", "", false},
		{"GET", "/openapi.json", "", "", false},
		{"HEAD", "/openapi.yaml", "", "", false},
		{"get", "/plants", "", "", true},
		{"PATCH", "/plants/1", jsonType, `{"name":"x"}`, true},
		{"TRACE", "/plants", "", "", true},
		{"OPTIONS", "/plants", "", "", true},
		{"DELETE", "/plants", "", "", true},
		{"POST", "/plants/1", jsonType, `{"id":1,"name":"a"}`, true},
		{"POST", "/healthz", "", "", true},
		{"PUT", "/plants/1", jsonType, `{"name":"Renamed","tag":"t"}`, true},
		{"PUT", "/plants/1", jsonType, `{"id":2,"name":"Other id"}`, true},
		{"PUT", "/plants/1", jsonType, `{"name":"` + strings.Repeat("x", plantstore.MaxNameLength+1) + `"}`, true},
		{"PUT", "/plants/1", "Content-Type: text/plain", `{"name":"x"}`, true},
		{"PUT", "/plants/77", jsonType, `{"name":"Nobody"}`, true},
		{"DELETE", "/plants/2", "", "", true},
		{"DELETE", "/plants/2", "", "", true},
		{"POST", "/plants", jsonType + "\nContent-Type: text/plain", `{"id":5,"name":"a"}`, true},
		{"POST", "/plants", jsonType + "\nContent-Encoding: gzip", `{"id":5,"name":"a"}`, true},
		{"POST", "/plants", jsonType + "\nTransfer-Encoding: chunked", "5\r\n{\"id\"\r\n11\r\n:6,\"name\":\"Chunk\"}\r\n0\r\n\r\n", true},
		{"POST", "/plants", jsonType + "\nTransfer-Encoding: chunked", "zz\r\n", true},
		{"POST", "/plants", jsonType + "\nContent-Length: 100", `{"id":7,"name":"Short"}`, true},
		{"POST", "/plants", jsonType + "\nContent-Length: 5", `{"id":7,"name":"Long"}`, true},
		{"POST", "/plants", jsonType + "\nContent-Length: 70000", `{"id":8,"name":"Announced as too large"}`, true},
		{"POST", "/plants", jsonType + "\nX-Request-Id: \xff\"<>", `{"id":9,"name":"a"}`, true},
		{"POST", "/plants", jsonType + "\nExpect: 100-continue", `{"id":10,"name":"a"}`, true},
		{"POST", "/plants", jsonType, `{"id":1,"name":"Changed"}`, true},
	} {
		f.Add(tc.method, tc.target, tc.headers, []byte(tc.body), tc.withToken)
	}

	s := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, method, target, headers string, body []byte, withToken bool) {
		token := ""
		if withToken {
			token = s.token
		}
		r, sent := fuzzRequest(method, target, headers, body, token)
		if r == nil {
			return // the server refuses it before any handler runs
		}
		named := namedIDs(r, sent)
		before := s.plants(t, named)
		s.log.take()
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, r)
		resp := w.Result()
		answer := w.Body.Bytes()
		status := resp.StatusCode
		explain := func() string {
			return fmt.Sprintf("request %s %q, headers %q, body %q\nanswer %d %v %q\nlog %s",
				r.Method, r.RequestURI, r.Header, truncate(string(sent), 300), status, resp.Header, truncate(string(answer), 300), s.log.take())
		}

		if status < 200 || http.StatusText(status) == "" {
			t.Fatalf("not a status a server may answer:\n%s", explain())
		}
		if status >= 500 {
			t.Fatalf("a 5xx:\n%s", explain())
		}
		if status >= 300 {
			if err := checkErrorBody(resp, answer); err != nil {
				t.Fatalf("%v:\n%s", err, explain())
			}
		}
		// The server routes on the escaped path, where %2F is no separator,
		// but the contract checker on the decoded one: for it /plants%2F1
		// is /plants/1, whose 404 it would call a missing 405.
		if !strings.Contains(strings.ToUpper(r.URL.RawPath), "%2F") {
			if err := s.contract.Check(r, resp, answer); err != nil {
				t.Fatalf("%v:\n%s", err, explain())
			}
		}
		if status == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), `Bearer realm="plantstore"`) {
			t.Fatalf("a 401 without the Bearer challenge:\n%s", explain())
		}
		if len(r.Header.Values("Authorization")) == 0 && needsToken(r) && status != http.StatusUnauthorized {
			t.Fatalf("no token, yet not a 401:\n%s", explain())
		}

		after := s.plants(t, named)
		if status >= 300 {
			for id, was := range before {
				if now := after[id]; !samePlant(was, now) {
					t.Fatalf("answered %d, yet plant %d changed from %v to %v:\n%s", status, id, was, now, explain())
				}
			}
			return
		}
		if err := s.checkStored(r, sent, answer, named, after); err != nil {
			t.Fatalf("answered %d, but %v:\n%s", status, err, explain())
		}
	})
}

// fuzzRequest builds a request from the fuzzer's parts and reads it as the
// server reads one off the wire, with http.ReadRequest and the server's own
// checks of names and values. It returns nil for what the server would
// refuse before any handler runs, and what the request's body holds once
// its transfer coding is undone.
func fuzzRequest(method, target, headers string, body []byte, token string) (*http.Request, []byte) {
	if !isToken(method) || !strings.HasPrefix(target, "/") || strings.IndexFunc(target, func(c rune) bool { return c <= ' ' || c == 0x7f }) >= 0 {
		return nil, nil
	}
	var raw bytes.Buffer
	fmt.Fprintf(&raw, "%s %s HTTP/1.1\r\nHost: plantstore.test\r\n", method, target)
	framed := false
	for line := range strings.SplitSeq(headers, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || !isToken(name) || strings.ContainsFunc(value, func(c rune) bool { return (c < ' ' && c != '\t') || c == 0x7f }) {
			return nil, nil
		}
		switch textproto.CanonicalMIMEHeaderKey(name) {
		case "Host":
			return nil, nil // a second Host is a 400 from the server itself
		case "Content-Length", "Transfer-Encoding":
			framed = true
		}
		raw.WriteString(line + "\r\n")
	}
	if token != "" {
		raw.WriteString("Authorization: Bearer " + token + "\r\n")
	}
	if !framed {
		fmt.Fprintf(&raw, "Content-Length: %d\r\n", len(body))
	}
	raw.WriteString("\r\n")
	raw.Write(body)
	r, err := http.ReadRequest(bufio.NewReader(&raw))
	if err != nil {
		return nil, nil
	}
	// Read the body now, so the ids it names can be looked at before the
	// handler runs, and give the handler the same bytes and the same error.
	sent, err := io.ReadAll(io.LimitReader(r.Body, 4*DefaultMaxBodyBytes))
	var rest io.Reader = bytes.NewReader(sent)
	if err != nil {
		rest = io.MultiReader(rest, errorReader{err})
	}
	r.Body = io.NopCloser(rest)
	r.RemoteAddr = "192.0.2.1:1234"
	return r, sent
}

type errorReader struct{ err error }

func (e errorReader) Read([]byte) (int, error) { return 0, e.err }

func isToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(c rune) bool {
		return c >= utf8.RuneSelf || !(unicode.IsLetter(c) || unicode.IsDigit(c) || strings.ContainsRune("!#$%&'*+-.^_`|~", c))
	})
}

// needsToken reports whether r, as a client wrote it, is one of the
// documented operations on plants, which all need a token.
func needsToken(r *http.Request) bool {
	path, _, _ := strings.Cut(r.RequestURI, "?")
	switch {
	case path == "/plants":
		return r.Method == "GET" || r.Method == "HEAD" || r.Method == "POST"
	case plainPlantPath.MatchString(path):
		return r.Method == "GET" || r.Method == "HEAD" || r.Method == "PUT" || r.Method == "DELETE"
	}
	return false
}

var plainPlantPath = regexp.MustCompile(`^/plants/[0-9A-Za-z_-]+$`)

// namedIDs are the ids a request could touch: the one in its path and any
// "id" members of its body, read leniently (duplicates, bad UTF-8 and
// trailing data allowed, and up to the first syntax error), so that a
// request the decoder refuses still names the plants it must not change.
func namedIDs(r *http.Request, body []byte) []int64 {
	var ids []int64
	if id, ok := pathPlantID(r); ok {
		ids = append(ids, id)
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return ids
	}
	for {
		tok, err := dec.ReadToken()
		if err != nil || tok.Kind() != '"' {
			return ids
		}
		member := tok.String() // the next read voids tok
		v, err := dec.ReadValue()
		if err != nil {
			return ids
		}
		if member == "id" && v.Kind() == '0' {
			if id, ok := exactInt64(string(v)); ok {
				ids = append(ids, id)
			}
		}
	}
}

func pathPlantID(r *http.Request) (int64, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/plants/")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	return id, err == nil
}

// plants reads each of ids from the store directly; nil is no plant.
func (s *fuzzServer) plants(t *testing.T, ids []int64) map[int64]*plantstore.Plant {
	t.Helper()
	found := make(map[int64]*plantstore.Plant, len(ids))
	for _, id := range ids {
		p, err := s.db.GetPlant(context.Background(), id)
		switch {
		case err == nil:
			found[id] = &p
		case plantstore.ErrorCode(err) == plantstore.ENOTFOUND:
			found[id] = nil
		default:
			t.Fatalf("read plant %d: %v", id, err)
		}
	}
	return found
}

func samePlant(p, q *plantstore.Plant) bool {
	if p == nil || q == nil {
		return p == q
	}
	return p.SameContent(*q)
}

// checkErrorBody holds a non-2xx answer to the contract's Error, without
// the contract checker's help: exactly {"error": status, "message": text}.
func checkErrorBody(resp *http.Response, body []byte) error {
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("%d with Content-Type %q", resp.StatusCode, ct)
	}
	var e struct {
		Error   *int
		Message *string
	}
	dec := stdjson.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || dec.More() {
		return fmt.Errorf("%d with a body that is not an Error: %v", resp.StatusCode, err)
	}
	if e.Error == nil || *e.Error != resp.StatusCode {
		return fmt.Errorf("%d with an Error whose error is not the status", resp.StatusCode)
	}
	if e.Message == nil || strings.TrimSpace(*e.Message) == "" {
		return fmt.Errorf("%d with an Error without a message", resp.StatusCode)
	}
	return nil
}

// checkStored checks that a 2xx write did what it answered: a create or
// update left the plant it answered in the store, a delete left none.
func (s *fuzzServer) checkStored(r *http.Request, sent, answer []byte, named []int64, after map[int64]*plantstore.Plant) error {
	var got struct {
		ID   *int64
		Name string
		Tag  *string
	}
	switch {
	case r.Method == "POST" && r.URL.Path == "/plants":
		if len(named) != 1 {
			return fmt.Errorf("the body names ids %v, not one", named)
		}
		if err := stdjson.Unmarshal(answer, &got); err != nil {
			return err
		}
		want := plantstore.Plant{ID: named[0], Name: got.Name, Tag: got.Tag}
		if p := after[named[0]]; p == nil || !p.SameContent(want) {
			return fmt.Errorf("the store holds %v, not the answered %v", p, want)
		}
	case r.Method == "PUT":
		if err := stdjson.Unmarshal(answer, &got); err != nil || got.ID == nil {
			return fmt.Errorf("answer without an id: %v", err)
		}
		want := plantstore.Plant{ID: *got.ID, Name: got.Name, Tag: got.Tag}
		if p := after[*got.ID]; p == nil || !p.SameContent(want) {
			return fmt.Errorf("the store holds %v, not the answered %v", p, want)
		}
	case r.Method == "DELETE":
		id, ok := pathPlantID(r)
		if !ok {
			return fmt.Errorf("deleted, but the path %q names no plant", r.URL.Path)
		}
		if after[id] != nil {
			return fmt.Errorf("plant %d is still stored", id)
		}
	}
	return nil
}
