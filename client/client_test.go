package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestNextLink(t *testing.T) {
	cases := map[string][]string{
		"":                        {},
		"/plants?after=5":         {`</plants?after=5>; rel="next"`},
		"http://h/p?a=1,2":        {`<http://h/p?a=1,2>; rel=next`},
		"/n":                      {`</first>; rel="first", </n>; rel="next"`},
		"/x":                      {`</first>; rel="first"`, `</x>; title="a;b"; rel="prefetch next"`},
		"/NEXT":                   {`</NEXT>; REL="Next"`},
		"/only-prev-is-not-next/": {`</p>; rel="prev"`, `</only-prev-is-not-next/>; rel="next"`},
	}
	for want, values := range cases {
		if got := nextLink(values); got != want {
			t.Errorf("nextLink(%q) = %q, want %q", values, got, want)
		}
	}
	if got := nextLink([]string{`</p>; rel="prev"`}); got != "" {
		t.Errorf("prev taken for next: %q", got)
	}
}

func TestNew(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://h", "http://", "::", "http://h?tenant=a", "http://h/?", "http://h/#top"} {
		if _, err := New(bad, "t"); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
	// Neither a password with a bare # in it (the rest of it then the
	// fragment) nor a query's secret is shown in the refusal.
	for _, bad := range []string{"http://u:hunter2@x#y@127.0.0.1:5", "http://h/?api_key=hunter2"} {
		if _, err := New(bad, "t"); err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "x#y") {
			t.Errorf("New(%q): %v; want a refusal that shows no part of the secret", bad, err)
		}
	}
	c, err := New("https://example.test/prefix/", "t")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.url("/plants/1", nil); got != "https://example.test/prefix/plants/1" {
		t.Errorf("url = %q", got)
	}
	for _, bad := range []string{"", "   ", "secret-token\n", "\tsecret-token", "secret\x00token", "secret\x7ftoken"} {
		_, err := New("https://example.test", bad)
		if !errors.Is(err, ErrToken) || strings.Contains(err.Error(), "secret") {
			t.Errorf("New with token %q: %v; want an ErrToken that does not quote the token", bad, err)
		}
	}
	for _, good := range []string{"ps_AZaz09-._~+/=", " ps_spaces_at_the_ends "} { // the service trims the spaces
		if _, err := New("https://example.test", good); err != nil {
			t.Errorf("token %q refused: %v", good, err)
		}
	}
}

func TestListNextStaysOnTheBaseURL(t *testing.T) {
	c, err := New("https://example.test", "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, next := range []string{"http://example.test/plants", "https://elsewhere.test/plants", "//elsewhere.test/plants"} {
		if _, err := c.ListNext(t.Context(), next); err == nil {
			t.Errorf("ListNext(%q) followed a link off the base URL", next)
		}
	}
}

// All follows next links only while they move on: a server that sends a
// page of no plants with a next link, a next link to the page itself or
// back before the last plant read, or the same plants again, makes it
// end with an error instead of reading pages forever.
func TestAllEndsOnPagesThatDoNotMoveOn(t *testing.T) {
	page := func(w http.ResponseWriter, next string, ids ...int) {
		if next != "" {
			w.Header().Set("Link", "<"+next+`>; rel="next"`)
		}
		w.Header().Set("Content-Type", "application/json")
		var plants []string
		for _, id := range ids {
			plants = append(plants, fmt.Sprintf(`{"id":%d,"name":"p%d"}`, id, id))
		}
		fmt.Fprintf(w, "[%s]", strings.Join(plants, ","))
	}
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request, n int) // n: the request's number, from 1
		want   []int64                                             // the plants yielded before the error
		says   string                                              // in the error; "" for none
	}{
		{"conforming", func(w http.ResponseWriter, r *http.Request, n int) {
			switch r.URL.Query().Get("after") {
			case "":
				page(w, "/plants?after=2&limit=2", 1, 2)
			case "2":
				page(w, "/plants?after=4&limit=2", 3, 4)
			default:
				page(w, "", 5)
			}
		}, []int64{1, 2, 3, 4, 5}, ""},
		{"empty page with a next link", func(w http.ResponseWriter, r *http.Request, n int) {
			page(w, "/plants?after=5&limit=2")
		}, nil, "a page of no plants"},
		{"empty page after plants", func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				page(w, "/plants?after=2&limit=2", 1, 2)
				return
			}
			page(w, "/plants?after=2&limit=2")
		}, []int64{1, 2}, "a page of no plants"},
		{"next link to itself", func(w http.ResponseWriter, r *http.Request, n int) {
			page(w, r.URL.RequestURI(), 1, 2)
		}, []int64{1, 2}, "whose next page is itself"},
		{"next link back", func(w http.ResponseWriter, r *http.Request, n int) {
			page(w, fmt.Sprintf("/plants?after=1&limit=2&n=%d", n), 1, 2)
		}, []int64{1, 2}, "starts after plant 1, not after 2"},
		{"the same plants again", func(w http.ResponseWriter, r *http.Request, n int) {
			page(w, fmt.Sprintf("/plants?after=2&limit=2&n=%d", n), 1, 2) // after ignored
		}, []int64{1, 2}, "sent plant 1 after plant 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tc.answer(w, r, int(requests.Add(1)))
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			var got []int64
			var errs []error
			for p, err := range newClient(t, srv.URL).All(ctx, ListOptions{Limit: 2}) {
				if err != nil {
					errs = append(errs, err)
				} else {
					got = append(got, p.ID)
				}
				if len(got)+len(errs) > 20 {
					break // a loop
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("All yielded plants %v; want %v", got, tc.want)
			}
			switch {
			case tc.says == "" && len(errs) != 0:
				t.Errorf("All yielded %v; want no error", errs)
			case tc.says == "":
			case len(errs) != 1 || ctx.Err() != nil || !strings.Contains(errs[0].Error(), tc.says):
				t.Errorf("All yielded %v after %d requests; want one error saying %q", errs, requests.Load(), tc.says)
			case requests.Load() > 2:
				t.Errorf("%d requests; want it to stop at the second page", requests.Load())
			}
		})
	}
}

// A 2xx that is not the plant asked for (null, {}, another plant: a
// --server of another JSON service) is an error, not a plant.
func TestAnswerThatIsNoPlantRefused(t *testing.T) {
	for _, body := range []string{`null`, `{}`, `{"id":999,"name":"Other"}`, `{"name":""}`} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		}))
		c, err := New(srv.URL, "t")
		if err != nil {
			t.Fatal(err)
		}
		if p, err := c.Get(t.Context(), 1); err == nil || !strings.Contains(err.Error(), "malformed answer: not the plant 1") {
			t.Errorf("Get answered %s: %+v, %v; want an error", body, p, err)
		}
		if p, _, err := c.UpdateIf(t.Context(), Plant{ID: 1, Name: "x"}, ""); err == nil {
			t.Errorf("Update answered %s: %+v, want an error", body, p)
		}
		if body != `{"id":999,"name":"Other"}` {
			if p, err := c.Create(t.Context(), Plant{ID: 1, Name: "x"}); err == nil {
				t.Errorf("Create answered %s: %+v, want an error", body, p)
			}
		}
		srv.Close()
	}
	// The contract's Plant may leave out the id: it is the one asked for.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"name":"Fern"}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL, "t")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c.Get(t.Context(), 7); err != nil || p.ID != 7 || p.Name != "Fern" {
		t.Errorf("Get(7) answered without an id: %+v, %v; want plant 7", p, err)
	}
	if p, _, err := c.UpdateIf(t.Context(), Plant{ID: 7, Name: "Fern"}, ""); err != nil || p.ID != 7 {
		t.Errorf("Update of 7 answered without an id: %+v, %v; want plant 7", p, err)
	}
}

// A client made without WithHTTPClient bounds each attempt by
// DefaultTimeout; one given a client keeps that client's.
func TestDefaultTimeout(t *testing.T) {
	c, err := New("http://127.0.0.1:1", "t")
	if err != nil {
		t.Fatal(err)
	}
	if c.http.Timeout != DefaultTimeout || DefaultTimeout <= 0 {
		t.Errorf("the default client's Timeout is %v, want DefaultTimeout (%v)", c.http.Timeout, DefaultTimeout)
	}
	c, err = New("http://127.0.0.1:1", "t", WithHTTPClient(&http.Client{}))
	if err != nil {
		t.Fatal(err)
	}
	if c.http.Timeout != 0 {
		t.Errorf("a client of the caller's: Timeout %v, want its own 0", c.http.Timeout)
	}
}

// A base URL with a path prefix, behind a proxy that strips it: the
// server links the next page without the prefix, and the client follows
// it under its base URL all the same. Requests name the client.
func TestPagesUnderAPathPrefix(t *testing.T) {
	var agents []string
	var mu sync.Mutex
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		agents = append(agents, r.Header.Get("User-Agent"))
		mu.Unlock()
		if r.URL.Path != "/api/plants" {
			http.Error(w, `{"error":404,"message":"not under the prefix"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("after") == "" {
			w.Header().Set("Link", `<`+srv.URL+`/plants?after=1&limit=1>; rel="next"`)
			io.WriteString(w, `[{"id":1,"name":"a"}]`)
			return
		}
		io.WriteString(w, `[{"id":2,"name":"b"}]`)
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/api/", "t")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for p, err := range c.All(t.Context(), ListOptions{Limit: 1}) {
		if err != nil {
			t.Fatalf("after %v: %v", ids, err)
		}
		ids = append(ids, p.ID)
	}
	if fmt.Sprint(ids) != "[1 2]" {
		t.Errorf("plants %v, want [1 2]", ids)
	}
	for _, a := range agents {
		if a != "plantstore-go-client" {
			t.Errorf("User-Agent %q", a)
		}
	}
}

// A 5xx's *Error carries the request id the service logged it under, and
// says it.
func TestErrorCarriesTheRequestID(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "ps-abc-1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":500,"message":"internal error"}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL, "t")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(t.Context(), 1)
	e, ok := errors.AsType[*Error](err)
	if !ok || e.RequestID != "ps-abc-1" || err.Error() != "plantstore: 500: internal error (request ps-abc-1)" {
		t.Errorf("Get against a 500: %v (%#v)", err, e)
	}
}
