package apitest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/getkin/kin-openapi/openapi3"
)

func TestDocumentIsValid(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Doc.Info.Version; got != "1.2.0" {
		t.Errorf("info.version = %q, want 1.2.0", got)
	}
	op := c.Doc.Paths.Find("/plants").Post
	if op == nil {
		t.Fatal("no POST /plants")
	}
	if got := op.RequestBody.Value.Content["application/json"].Schema.Ref; got != "#/components/schemas/NewPlant" {
		t.Errorf("POST /plants body schema = %q", got)
	}
	if got := op.Responses.Status(200).Value.Content["application/json"].Schema.Ref; got != "#/components/schemas/Plant" {
		t.Errorf("POST /plants 200 schema = %q", got)
	}
	if got := op.Responses.Status(400).Value.Content["application/json"].Schema.Ref; got != "#/components/schemas/Error" {
		t.Errorf("POST /plants 400 schema = %q", got)
	}
	if len(c.Doc.Security) != 1 || c.Doc.Security[0]["bearerAuth"] == nil {
		t.Errorf("document security = %v, want bearerAuth", c.Doc.Security)
	}
	if s := c.Doc.Components.SecuritySchemes["bearerAuth"].Value; s.Type != "http" || s.Scheme != "bearer" {
		t.Errorf("bearerAuth = %s %s, want http bearer", s.Type, s.Scheme)
	}
}

// The checker must catch drift, or the conformance tests prove nothing.
func TestCheckCatchesDrift(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path string
		status             int
		contentType, body  string
	}{
		{"id echoed is fine but name missing", "POST", "/plants", 200, "application/json", `{"id":1}`},
		{"name of wrong type", "POST", "/plants", 200, "application/json", `{"name":5}`},
		{"tag null", "POST", "/plants", 200, "application/json", `{"name":"a","tag":null}`},
		{"undocumented status", "POST", "/plants", 418, "application/json", `{"error":418,"message":"teapot"}`},
		{"error as text", "POST", "/plants", 400, "text/plain", `bad`},
		{"error code differs from status", "POST", "/plants", 400, "application/json", `{"error":500,"message":"x"}`},
		{"error without message", "GET", "/nowhere", 404, "application/json", `{"error":404}`},
		{"undocumented route answers 200", "GET", "/nowhere", 200, "application/json", `{}`},
		{"name with a C1 control", "POST", "/plants", 200, "application/json", `{"name":"a\u0085b"}`},
		{"undocumented HEAD status", "HEAD", "/plants/1", 409, "application/json", ``},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "http://127.0.0.1"+tc.path, nil)
			resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Content-Type": {tc.contentType}, "X-Request-Id": {"ps-1"}},
				Body: io.NopCloser(strings.NewReader(tc.body))}
			if err := c.Check(req, resp, []byte(tc.body)); err == nil {
				t.Errorf("Check accepted %d %s", tc.status, tc.body)
			}
		})
	}
	// Headers the document requires are checked, on HEAD as on GET.
	for _, tc := range []struct {
		name, method, path string
		status             int
		header             http.Header
	}{
		{"no X-Request-Id", "GET", "/healthz", 200, http.Header{}},
		{"HEAD without X-Request-Id", "HEAD", "/plants/1", 200, http.Header{}},
		{"HEAD 401 without WWW-Authenticate", "HEAD", "/plants", 401, http.Header{"X-Request-Id": {"ps-1"}}},
		{"HEAD 503 without Retry-After", "HEAD", "/readyz", 503, http.Header{"X-Request-Id": {"ps-1"}}},
		{"Retry-After 0", "HEAD", "/plants", 429, http.Header{"X-Request-Id": {"ps-1"}, "Retry-After": {"0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "http://127.0.0.1"+tc.path, nil)
			tc.header.Set("Content-Type", "application/json")
			body := `{"status":"ok"}`
			if tc.status >= 300 {
				body = fmt.Sprintf(`{"error":%d,"message":"x"}`, tc.status)
			}
			resp := &http.Response{StatusCode: tc.status, Header: tc.header}
			if err := c.Check(req, resp, []byte(body)); err == nil {
				t.Errorf("Check accepted %s %s %d with headers %v", tc.method, tc.path, tc.status, tc.header)
			}
		})
	}
	req := httptest.NewRequest("POST", "http://127.0.0.1/plants", nil)
	good := `{"name":"a","tag":""}`
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"ps-1"}}}
	if err := c.Check(req, resp, []byte(good)); err != nil {
		t.Errorf("Check refused a good Plant: %v", err)
	}
	req = httptest.NewRequest("HEAD", "http://127.0.0.1/plants/1", nil)
	resp = &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"ps-1"}, "Etag": {`"x"`}}}
	if err := c.Check(req, resp, nil); err != nil {
		t.Errorf("Check refused a good answer to HEAD: %v", err)
	}
}

// The document declares HEAD wherever GET is served (as Go's ServeMux
// serves it), answering as GET does: the same statuses, parameters and
// security, and no body.
func TestHeadMirrorsGet(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range c.Doc.Paths.Map() {
		get, head := item.Get, item.Head
		if get == nil {
			if head != nil {
				t.Errorf("HEAD %s without GET", path)
			}
			continue
		}
		if head == nil {
			t.Errorf("GET %s has no HEAD", path)
			continue
		}
		if a, b := slices.Sorted(maps.Keys(get.Responses.Map())), slices.Sorted(maps.Keys(head.Responses.Map())); !slices.Equal(a, b) {
			t.Errorf("%s: GET answers %v, HEAD %v", path, a, b)
		}
		for status, r := range head.Responses.Map() {
			if len(r.Value.Content) > 0 {
				t.Errorf("HEAD %s %s has content", path, status)
			}
			for name := range get.Responses.Value(status).Value.Headers {
				if r.Value.Headers[name] == nil {
					t.Errorf("HEAD %s %s lacks GET's header %s", path, status, name)
				}
			}
		}
		a, _ := json.Marshal([]any{get.Parameters, get.Security})
		b, _ := json.Marshal([]any{head.Parameters, head.Security})
		if string(a) != string(b) {
			t.Errorf("%s: GET and HEAD differ in parameters or security:\n GET  %s\n HEAD %s", path, a, b)
		}
	}
}

// Every answer carries X-Request-Id, and every 503 and 507 Retry-After:
// the document says so of each.
func TestEveryAnswerDeclaresItsHeaders(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range c.Doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status, r := range op.Responses.Map() {
				id := r.Value.Headers["X-Request-Id"]
				switch {
				case id == nil:
					t.Errorf("%s %s %s: no X-Request-Id", method, path, status)
				case !id.Value.Required && status != "431":
					t.Errorf("%s %s %s: X-Request-Id not required", method, path, status)
				}
				if status == "503" || status == "507" || status == "429" {
					if ra := r.Value.Headers["Retry-After"]; ra == nil || !ra.Value.Required {
						t.Errorf("%s %s %s: Retry-After not required", method, path, status)
					}
				}
			}
		}
	}
}

// 1.2.0 is additive: every operation, answer and schema of 1.0.0 holds,
// its schemas as keptMeaning says they are now written.
func TestAdditiveOverV1_0_0(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../../api/testdata/openapi-1.0.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	old, err := openapi3.NewLoader().LoadFromData(src)
	if err != nil {
		t.Fatal(err)
	}
	if old.Info.Version != "1.0.0" {
		t.Fatalf("the snapshot is version %s", old.Info.Version)
	}
	keptMeaning(t, old, c.Doc)
	for path, item := range old.Paths.Map() {
		for method, op := range item.Operations() {
			now := c.Doc.Paths.Find(path)
			if now == nil || now.GetOperation(method) == nil {
				t.Errorf("1.0.0's %s %s is gone", method, path)
				continue
			}
			for status, resp := range op.Responses.Map() {
				got := now.GetOperation(method).Responses.Value(status)
				if got == nil {
					t.Errorf("1.0.0's %s %s %s is gone", method, path, status)
					continue
				}
				if a, b := schemaRefs(resp.Value), schemaRefs(got.Value); a != b {
					t.Errorf("%s %s %s: body was %s, is %s", method, path, status, a, b)
				}
			}
		}
	}
	for name, schema := range old.Components.Schemas {
		a, _ := json.Marshal(schema.Value)
		now := c.Doc.Components.Schemas[name]
		if now == nil {
			t.Errorf("schema %s is gone", name)
			continue
		}
		if b, _ := json.Marshal(now.Value); string(a) != string(b) {
			t.Errorf("schema %s changed:\n was %s\n is  %s", name, a, b)
		}
	}
}

func schemaRefs(r *openapi3.Response) string {
	var out string
	for ct, mt := range r.Content {
		if mt.Schema != nil {
			out += ct + "=" + mt.Schema.Ref + ";"
		}
	}
	return out
}

// controlFree is the pattern of names and tags: no character of Unicode's
// category Cc, written as its two ranges.
const controlFree = `^[^\x00-\x1F\x7F-\x9F]*$`

// keptMeaning rewrites 1.0.0's schemas as the document now writes them,
// where only the writing changed, each for the reason beside it, so that
// the comparison holds everything else to what 1.0.0 said.
func keptMeaning(t *testing.T, old, now *openapi3.T) {
	t.Helper()
	// Without ECMA-262's u flag, which JSON Schema tools need not use,
	// [^\p{Cc}] refuses the characters p, {, C, c and }: Spectral read it
	// so and refused "Monstera deliciosa". \xHH escapes mean the same in
	// every regular expression dialect, Go's and ECMA-262's among them;
	// the set is the same (TestControlPatternIsCc).
	plant := old.Components.Schemas["Plant"].Value
	for _, name := range []string{"name", "tag"} {
		p := plant.Properties[name].Value
		if p.Pattern != `^[^\p{Cc}]*$` {
			t.Fatalf("1.0.0's Plant.%s pattern is %q", name, p.Pattern)
		}
		p.Pattern = controlFree
	}
	// JSON numbers beyond 2^53 lose precision in JavaScript, so the
	// reference page showed 1.0.0's bounds as ±9223372036854776000, which
	// the server refuses. format int64 is that range exactly; the
	// description now states it in words.
	id := old.Components.Schemas["NewPlant"].Value.AllOf[1].Value.Properties["id"].Value
	if id.Format != "int64" || id.Min == nil || *id.Min != math.MinInt64 || id.Max == nil || *id.Max != math.MaxInt64 {
		t.Fatalf("1.0.0's NewPlant.id is not the int64 range: %+v", id)
	}
	id.Min, id.Max = nil, nil
	nowID := now.Components.Schemas["NewPlant"].Value.AllOf[1].Value.Properties["id"].Value
	if !strings.HasPrefix(nowID.Description, strings.TrimSuffix(id.Description, ".")) ||
		!strings.Contains(nowID.Description, "-9223372036854775808 to 9223372036854775807") {
		t.Errorf("NewPlant.id's description %q does not keep 1.0.0's and state the range", nowID.Description)
	}
	id.Description = nowID.Description
}

// controlFree refuses exactly the characters \p{Cc} does. Category Cc
// is these two ranges and nothing beyond (a Unicode stability policy),
// and every character of the Basic Multilingual Plane is tried against
// both patterns, as Go reads them.
func TestControlPatternIsCc(t *testing.T) {
	want := []unicode.Range16{{Lo: 0x00, Hi: 0x1F, Stride: 1}, {Lo: 0x7F, Hi: 0x9F, Stride: 1}}
	if !slices.Equal(unicode.Cc.R16, want) || len(unicode.Cc.R32) > 0 {
		t.Fatalf("category Cc is %+v %+v", unicode.Cc.R16, unicode.Cc.R32)
	}
	was, now := regexp.MustCompile(`^[^\p{Cc}]*$`), regexp.MustCompile(controlFree)
	for r := rune(0); r <= 0xFFFF; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue // surrogates are not characters
		}
		s := string(r)
		if was.MatchString(s) != now.MatchString(s) || now.MatchString(s) == unicode.Is(unicode.Cc, r) {
			t.Fatalf("U+%04X: \\p{Cc} pattern %v, now %v", r, was.MatchString(s), now.MatchString(s))
		}
	}
}

// Every operation says what it does, and every parameter, header and
// answer body shows an example, so the reference page and generated
// clients have one to show.
func TestDescriptionsAndExamples(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	headers := func(where string, hs openapi3.Headers) {
		for name, h := range hs {
			if h.Value.Example == nil {
				t.Errorf("%s: header %s has no example", where, name)
			}
		}
	}
	content := func(where string, cs openapi3.Content) {
		for ct, mt := range cs {
			if mt.Example == nil && len(mt.Examples) == 0 {
				t.Errorf("%s: %s has no example", where, ct)
			}
		}
	}
	check := func(where string, item *openapi3.PathItem) {
		for method, op := range item.Operations() {
			at := method + " " + where
			if strings.TrimSpace(op.Description) == "" {
				t.Errorf("%s has no description", at)
			}
			for _, p := range slices.Concat(item.Parameters, op.Parameters) {
				if p.Value.Example == nil && len(p.Value.Examples) == 0 {
					t.Errorf("%s: parameter %s has no example", at, p.Value.Name)
				}
			}
			if op.RequestBody != nil {
				content(at+" request", op.RequestBody.Value.Content)
			}
			for status, r := range op.Responses.Map() {
				headers(at+" "+status, r.Value.Headers)
				content(at+" "+status, r.Value.Content)
			}
		}
	}
	for path, item := range c.Doc.Paths.Map() {
		check(path, item)
	}
	for name, item := range c.Doc.Webhooks {
		check("webhook "+name, item)
	}
}
