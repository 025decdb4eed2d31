package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/plantstore/plantstore/internal/apitest"
)

// The documents the running service serves are the contract every answer
// of this suite is checked against: fetched as a client fetches them,
// each is a valid OpenAPI document, names where it was fetched from as
// its server, and is otherwise the embedded one, so it validates every
// answer the suite sees; a sample of answers is checked against it
// directly too.
func TestServedDocumentIsTheContract(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		embedded, err := apitest.Load()
		if err != nil {
			t.Fatal(err)
		}
		// Accept-Encoding left to the transport is gzip, undone by it.
		for _, fetch := range []struct{ path, encoding string }{
			{"/openapi.json", ""}, {"/openapi.json", "identity"}, {"/openapi.yaml", ""}, {"/openapi.yaml", "identity"},
		} {
			resp, body := e.do("GET", fetch.path, map[string]string{"Accept-Encoding": fetch.encoding}, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d", fetch.path, resp.StatusCode)
			}
			served, err := apitest.Parse(body)
			if err != nil {
				t.Fatalf("%s (Accept-Encoding %q): %v", fetch.path, fetch.encoding, err)
			}
			if s := served.Doc.Servers; len(s) != 1 || s[0].URL != e.url || len(s[0].Variables) != 0 {
				t.Errorf("%s: servers %+v, want %s alone", fetch.path, s, e.url)
			}
			if a, b := withoutServers(t, served), withoutServers(t, embedded); a != b {
				t.Errorf("%s differs from the embedded document beyond its servers", fetch.path)
			}

			client := &http.Client{Transport: &apitest.Transport{T: t, Contract: served}}
			for _, req := range []struct{ method, path, token, body string }{
				{"POST", "/plants", e.writeToken, `{"id":1,"name":"Fern","tag":"shade"}`},
				{"GET", "/plants", e.readToken, ""},
				{"HEAD", "/plants/1", e.readToken, ""},
				{"PUT", "/plants/1", e.writeToken, `{"name":"Fern"}`},
				{"GET", "/plants/2", e.readToken, ""},
				{"GET", "/plants", "", ""},
				{"POST", "/plants", e.readToken, `{"id":2,"name":"Aloe"}`},
				{"DELETE", "/plants/1", e.writeToken, ""},
				{"GET", "/healthz", "", ""},
				{"GET", "/readyz", "", ""},
				{"GET", "/nowhere", "", ""},
			} {
				r, err := http.NewRequest(req.method, e.url+req.path, strings.NewReader(req.body))
				if err != nil {
					t.Fatal(err)
				}
				if req.token != "" {
					r.Header.Set("Authorization", "Bearer "+req.token)
				}
				if req.body != "" {
					r.Header.Set("Content-Type", "application/json")
				}
				resp, err := client.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
		}
	})
}

// withoutServers is c's document as JSON, its servers left out.
func withoutServers(t *testing.T, c *apitest.Contract) string {
	t.Helper()
	doc := *c.Doc
	doc.Servers = nil
	b, err := json.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
