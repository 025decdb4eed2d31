package apitest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDocumentIsValid(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Doc.Info.Version; got != "1.0.0" {
		t.Errorf("info.version = %q, want 1.0.0", got)
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
