package client

import "testing"

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
	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://h", "http://", "::"} {
		if _, err := New(bad, "t"); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
	c, err := New("https://example.test/prefix/", "t")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.url("/plants/1", nil); got != "https://example.test/prefix/plants/1" {
		t.Errorf("url = %q", got)
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
