package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// The token goes where the client was pointed, and nowhere else: a
// redirect to another origin (here another port of the same host, which
// net/http would send the Authorization header to) is not followed; one
// within the origin is.
func TestRedirectKeepsTheTokenAtHome(t *testing.T) {
	var leaked atomic.Value
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"name":"elsewhere"}`))
	}))
	defer elsewhere.Close()
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/plants/1":
			http.Redirect(w, r, elsewhere.URL+"/plants/1", http.StatusTemporaryRedirect)
		case "/plants/2":
			http.Redirect(w, r, "/plants/3", http.StatusTemporaryRedirect)
		case "/plants/3":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"name":"at home"}`))
		}
	}))
	defer home.Close()
	for _, h := range []*http.Client{http.DefaultClient, {CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}} {
		c, err := New(home.URL, "pst_secret")
		if h != http.DefaultClient {
			c, err = New(home.URL, "pst_secret", WithHTTPClient(h))
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "not following a redirect") {
			t.Errorf("a redirect to another origin: %v", err)
		}
		if v := leaked.Load(); v != nil {
			t.Fatalf("the other origin got Authorization %q", v)
		}
		if p, err := c.Get(context.Background(), 2); err != nil || p.Name != "at home" {
			t.Errorf("a redirect within the origin: %+v, %v", p, err)
		}
	}
}

// A server behind a proxy names its next page under its public URL; a
// client of the server's own address takes the same page there, and
// still never sends the token to the public URL's host.
func TestNextPageUnderAPublicURL(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Query().Get("after") {
		case "":
			w.Header().Set("Link", `<https://api.example.test/v1/plants?after=1&limit=1>; rel="next"`)
			w.Write([]byte(`[{"id":1,"name":"a"}]`))
		case "1":
			w.Header().Set("Link", `<https://api.example.test/v1/elsewhere?after=2>; rel="next"`)
			w.Write([]byte(`[{"id":2,"name":"b"}]`))
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "pst_secret")
	if err != nil {
		t.Fatal(err)
	}
	page, err := c.List(context.Background(), ListOptions{Limit: 1})
	if err != nil || page.Next != srv.URL+"/plants?after=1&limit=1" {
		t.Fatalf("first page: next %q, %v", page.Next, err)
	}
	// Its own next link names another resource there: not taken for
	// the next page.
	page, err = c.ListNext(context.Background(), page.Next)
	if err == nil || !strings.Contains(err.Error(), "not following it") {
		t.Errorf("a next link to another resource: %q, %v", page.Next, err)
	}
	if len(queries) != 2 || queries[1] != "after=1&limit=1" {
		t.Errorf("queries asked: %q", queries)
	}
}

// WithHTTPClient(nil) is the default client, not a panic.
func TestNilHTTPClientIsTheDefault(t *testing.T) {
	if _, err := New("http://127.0.0.1:1", "pst_x", WithHTTPClient(nil)); err != nil {
		t.Fatal(err)
	}
}
