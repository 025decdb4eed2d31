package apitest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

func TestDocumentIsValid(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Doc.Info.Version; got != "1.1.0" {
		t.Errorf("info.version = %q, want 1.1.0", got)
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "http://127.0.0.1"+tc.path, nil)
			resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Content-Type": {tc.contentType}},
				Body: io.NopCloser(strings.NewReader(tc.body))}
			if err := c.Check(req, resp, []byte(tc.body)); err == nil {
				t.Errorf("Check accepted %d %s", tc.status, tc.body)
			}
		})
	}
	req := httptest.NewRequest("POST", "http://127.0.0.1/plants", nil)
	good := `{"name":"a","tag":""}`
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}
	if err := c.Check(req, resp, []byte(good)); err != nil {
		t.Errorf("Check refused a good Plant: %v", err)
	}
}

// 1.1.0 is additive: every operation, answer and schema of 1.0.0 holds.
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
