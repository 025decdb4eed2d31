package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/client"
)

func wantStatus(t *testing.T, err error, status int) {
	t.Helper()
	if got := client.StatusCode(err); got != status {
		t.Fatalf("error %v, want status %d", err, status)
	}
}

func TestReadUpdateDeleteThroughClient(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		ctx := context.Background()
		created, err := e.api.Create(ctx, client.Plant{ID: 7, Name: "Fern", Tag: client.Tag("indoor")})
		if err != nil || created.ID != 7 || created.Name != "Fern" || *created.Tag != "indoor" {
			t.Fatalf("Create = %+v, %v", created, err)
		}
		got, err := e.api.Get(ctx, 7)
		if err != nil || got.ID != 7 || got.Name != "Fern" || got.Tag == nil || *got.Tag != "indoor" {
			t.Fatalf("Get = %+v, %v", got, err)
		}
		updated, err := e.api.Update(ctx, client.Plant{ID: 7, Name: "Boston fern", Tag: client.Tag("hanging")})
		if err != nil || updated.Name != "Boston fern" || *updated.Tag != "hanging" {
			t.Fatalf("Update = %+v, %v", updated, err)
		}
		untagged, err := e.api.Update(ctx, client.Plant{ID: 7, Name: "Boston fern"})
		if err != nil || untagged.Tag != nil {
			t.Fatalf("Update without tag = %+v, %v", untagged, err)
		}
		if got, _ := e.api.Get(ctx, 7); got.Tag != nil || got.Name != "Boston fern" {
			t.Errorf("after removing the tag Get = %+v", got)
		}
		// The raw answer has no tag member at all.
		resp, body := e.do("GET", "/plants/7", map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
		if resp.StatusCode != 200 || string(body) != `{"id":7,"name":"Boston fern"}` {
			t.Errorf("GET /plants/7: %d %s", resp.StatusCode, body)
		}
		if err := e.api.Delete(ctx, 7); err != nil {
			t.Fatal(err)
		}
		_, err = e.api.Get(ctx, 7)
		wantStatus(t, err, 404)
		wantStatus(t, e.api.Delete(ctx, 7), 404)
		_, err = e.api.Update(ctx, client.Plant{ID: 7, Name: "ghost"})
		wantStatus(t, err, 404)
		if _, ok := e.stored(7); ok {
			t.Error("an update of a deleted plant created it")
		}
		if _, err := e.api.Create(ctx, client.Plant{ID: 7, Name: "Fern again"}); err != nil {
			t.Errorf("create after delete: %v", err)
		}
		// Replays and conflicts through the client.
		if _, err := e.api.Create(ctx, client.Plant{ID: 7, Name: "Fern again"}); err != nil {
			t.Errorf("replay: %v", err)
		}
		_, err = e.api.Create(ctx, client.Plant{ID: 7, Name: "Other"})
		wantStatus(t, err, 409)
		if apiErr, ok := errors.AsType[*client.Error](err); !ok || !strings.Contains(apiErr.Message, "already exists") {
			t.Errorf("the client's error is %v", err)
		}
	})
}

func TestDeleteAnswers204Empty(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		e.create(`{"id":1,"name":"a"}`)
		resp, body := e.do("DELETE", "/plants/1", map[string]string{"Authorization": "Bearer " + e.writeToken}, nil)
		if resp.StatusCode != 204 || len(body) != 0 {
			t.Errorf("DELETE: %d %q", resp.StatusCode, body)
		}
	})
}

func TestScopesOfEachOperation(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		e.create(`{"id":1,"name":"a"}`)
		writeOnly := e.issue("write-only", plantstore.ScopePlantsWrite)
		body := func() *strings.Reader { return strings.NewReader(`{"name":"b"}`) }
		for _, tc := range []struct {
			method, path, token string
			status              int
		}{
			{"GET", "/plants", writeOnly, 403},
			{"GET", "/plants/1", writeOnly, 403},
			{"PUT", "/plants/1", e.readToken, 403},
			{"DELETE", "/plants/1", e.readToken, 403},
			{"GET", "/plants", "", 401},
			{"GET", "/plants/1", "", 401},
			{"PUT", "/plants/1", "", 401},
			{"DELETE", "/plants/1", "", 401},
			{"GET", "/plants", e.readToken, 200},
			{"GET", "/plants/1", e.readToken, 200},
		} {
			auth := ""
			if tc.token != "" {
				auth = "Bearer " + tc.token
			}
			resp, b := e.do(tc.method, tc.path, map[string]string{"Authorization": auth, "Content-Type": "application/json"}, body())
			if resp.StatusCode != tc.status {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, resp.StatusCode, b, tc.status)
			}
		}
		if p, _ := e.stored(1); p.Name != "a" {
			t.Errorf("a refused request changed the plant: %v", p)
		}
	})
}

func TestBadPathIDs(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		for _, id := range []string{"abc", "1.5", "+1", "1e3", "9223372036854775808", "-9223372036854775809", "0x10", "%20", "1%00"} {
			for _, method := range []string{"GET", "PUT", "DELETE"} {
				resp, body := e.do(method, "/plants/"+id, map[string]string{
					"Authorization": "Bearer " + e.writeToken, "Content-Type": "application/json",
				}, strings.NewReader(`{"name":"x"}`))
				wantError(t, resp, body, 400, "id in the path")
			}
		}
		for _, id := range []string{"9223372036854775807", "-9223372036854775808", "0"} {
			resp, body := e.do("GET", "/plants/"+id, map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
			wantError(t, resp, body, 404, "not found")
		}
	})
}

func TestUpdateRules(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		e.create(`{"id":5,"name":"Palm","tag":"tall"}`)
		put := func(path, body string) (*http.Response, []byte) {
			return e.do("PUT", path, map[string]string{"Authorization": "Bearer " + e.writeToken, "Content-Type": "application/json"}, strings.NewReader(body))
		}
		if resp, body := put("/plants/5", `{"id":5,"name":"Palm","tag":"short"}`); resp.StatusCode != 200 || string(body) != `{"id":5,"name":"Palm","tag":"short"}` {
			t.Errorf("PUT with the same id: %d %s", resp.StatusCode, body)
		}
		for _, tc := range []struct{ body, word string }{
			{`{"id":6,"name":"Palm"}`, "differs"},
			{`{"id":"5","name":"Palm"}`, "integer"},
			{`{"tag":"x"}`, "name"},
			{`{"name":""}`, "name"},
			{`{"name":"a","tag":null}`, "tag"},
			{`{"name":"a\u0007"}`, "control"},
			{`{"name":"a","name":"b"}`, "duplicate"},
			{`[]`, "object"},
			{``, "empty"},
		} {
			resp, body := put("/plants/5", tc.body)
			wantError(t, resp, body, 400, tc.word)
		}
		resp, body := e.do("PUT", "/plants/5", map[string]string{"Authorization": "Bearer " + e.writeToken, "Content-Type": "text/plain"}, strings.NewReader(`{"name":"x"}`))
		wantError(t, resp, body, 415)
		resp, body = put("/plants/5", `{"name":"x","pad":"`+strings.Repeat("p", 70000)+`"}`)
		wantError(t, resp, body, 413)
		if p, _ := e.stored(5); p.Name != "Palm" || *p.Tag != "short" {
			t.Errorf("refused updates changed the plant: %v", p)
		}
	})
}

func TestListPagingVisitsEveryPlantOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		ctx := context.Background()
		var want, wantTagged []int64
		for i := range 47 {
			id := int64(i*i - 400) // negative and positive, created out of order below
			want = append(want, id)
			p := client.Plant{ID: id, Name: fmt.Sprint("p", id)}
			if i%4 == 0 {
				p.Tag = client.Tag("a b&c") // needs escaping in the URL
				wantTagged = append(wantTagged, id)
			}
			if _, err := e.api.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(want)
		slices.Sort(wantTagged)
		collect := func(opts client.ListOptions) []int64 {
			var got []int64
			for p, err := range e.clientWith(e.readToken).All(ctx, opts) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, p.ID)
			}
			return got
		}
		for _, limit := range []int{1, 7, 47, 100} {
			if got := collect(client.ListOptions{Limit: limit}); !slices.Equal(got, want) {
				t.Errorf("limit %d visited %v, want %v", limit, got, want)
			}
		}
		if got := collect(client.ListOptions{Limit: 3, Tag: client.Tag("a b&c")}); !slices.Equal(got, wantTagged) {
			t.Errorf("tag filter visited %v, want %v", got, wantTagged)
		}
		after := int64(0)
		i := slices.IndexFunc(want, func(id int64) bool { return id > 0 })
		if got := collect(client.ListOptions{Limit: 5, After: &after}); !slices.Equal(got, want[i:]) {
			t.Errorf("after 0 visited %v, want %v", got, want[i:])
		}

		// The raw headers: the next link keeps limit and tag; the last page has none.
		resp, body := e.do("GET", "/plants?limit=2&tag=a+b%26c", map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
		link := resp.Header.Get("Link")
		wantLink := fmt.Sprintf(`<%s/plants?after=%d&limit=2&tag=a+b%%26c>; rel="next"`, e.url, wantTagged[1])
		if resp.StatusCode != 200 || link != wantLink {
			t.Errorf("Link %q, want %q (body %s)", link, wantLink, body)
		}
		resp, body = e.do("GET", "/plants?limit=1000", map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
		if resp.Header.Get("Link") != "" || strings.Count(string(body), `"id"`) != len(want) {
			t.Errorf("a page holding everything: Link %q, %d plants", resp.Header.Get("Link"), strings.Count(string(body), `"id"`))
		}
		// Exactly a full last page: its Link would lead to an empty page, so it has none.
		resp, _ = e.do("GET", "/plants?limit=47", map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
		if resp.Header.Get("Link") != "" {
			t.Errorf("a page ending exactly at the last plant links %q", resp.Header.Get("Link"))
		}
		resp, body = e.do("GET", "/plants?tag=none", map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
		if resp.StatusCode != 200 || string(body) != "[]" {
			t.Errorf("an empty listing: %d %s", resp.StatusCode, body)
		}
		first, err := e.api.List(ctx, client.ListOptions{Limit: 1})
		if err != nil || len(first.Plants) != 1 || first.Plants[0].ID != want[0] || first.Next == "" {
			t.Errorf("List(limit 1) = %+v, %v", first, err)
		}
	})
}

func TestListQueryErrors(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		for _, q := range []string{
			"limit=0", "limit=-1", "limit=abc", "limit=1001", "limit=2147483648", "limit=99999999999999999999",
			"limit=1.5", "limit=", "limit=+5", "limit=1&limit=2", "after=abc", "after=1.5", "after=",
			"after=9223372036854775808", "tag=" + strings.Repeat("t", 101), "tag=a%07b", "tag=a&tag=b", "limit=%zz",
		} {
			resp, body := e.do("GET", "/plants?"+q, map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
			wantError(t, resp, body, 400)
		}
		for _, q := range []string{"limit=1", "limit=1000", "after=-9223372036854775808", "after=9223372036854775807", "tag=", "unknown=1"} {
			if resp, body := e.do("GET", "/plants?"+q, map[string]string{"Authorization": "Bearer " + e.readToken}, nil); resp.StatusCode != 200 {
				t.Errorf("?%s: %d %s", q, resp.StatusCode, body)
			}
		}
		// "tag" alone is "tag=": the plants whose tag is empty.
		e.create(`{"id":1,"name":"x","tag":""}`)
		e.create(`{"id":2,"name":"y","tag":"a"}`)
		if resp, body := e.do("GET", "/plants?tag", map[string]string{"Authorization": "Bearer " + e.readToken}, nil); resp.StatusCode != 200 || string(body) != `[{"id":1,"name":"x","tag":""}]` {
			t.Errorf("GET /plants?tag: %d %s, want plant 1 alone", resp.StatusCode, body)
		}
		// A "+" arrives as a space: the message says why it quotes one,
		// and advises what is accepted (a sign is not, even as %2B).
		for _, path := range []string{"/plants?limit=+5", "/plants?after=+5", "/events?limit=+5", "/events?after=+5"} {
			resp, body := e.do("GET", path, map[string]string{"Authorization": "Bearer " + e.readToken}, nil)
			if wantError(t, resp, body, 400); !strings.Contains(string(body), `got \" 5\" (a \"+\" in a query string is a space; send the number without a sign or spaces)`) {
				t.Errorf("GET %s: %s, want the space explained", path, body)
			}
			if strings.Contains(string(body), "%2B") {
				t.Errorf("GET %s: %s advises %%2B, which is refused too", path, body)
			}
		}
		if resp, body := e.do("GET", "/plants?limit=abc", map[string]string{"Authorization": "Bearer " + e.readToken}, nil); strings.Contains(string(body), "is a space") {
			t.Errorf("GET /plants?limit=abc: %d %s, a hint about a space it does not have", resp.StatusCode, body)
		}
	})
}

// A semicolon in a query is a character (RFC 3986): ?tag=a;b asks for the
// tag "a;b", and a parameter the route ignores is ignored with one in it.
func TestSemicolonInQuery(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		e.create(`{"id":1,"name":"x","tag":"a;b"}`)
		e.create(`{"id":2,"name":"y","tag":"a"}`)
		read := map[string]string{"Authorization": "Bearer " + e.readToken}
		resp, body := e.do("GET", "/plants?tag=a;b", read, nil)
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"id":1`) || strings.Contains(string(body), `"id":2`) {
			t.Errorf("GET /plants?tag=a;b: %d %s", resp.StatusCode, body)
		}
		for _, path := range []string{"/plants?limit=2&x=a;b", "/events?x=a;b", "/events?after=0&x=;"} {
			if resp, body := e.do("GET", path, read, nil); resp.StatusCode != 200 {
				t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
			}
		}
		if resp, body := e.do("GET", "/plants?tag=%zz", read, nil); resp.StatusCode != 400 || !strings.Contains(string(body), "malformed") {
			t.Errorf("GET /plants?tag=%%zz: %d %s, want 400", resp.StatusCode, body)
		}
	})
}
