package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func TestCreateAnswersThePlant(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		cases := []struct{ name, body, want string }{
			{"tagged", `{"id":1,"name":"Monstera","tag":"tropical"}`, `{"name":"Monstera","tag":"tropical"}`},
			{"untagged has no tag member", `{"id":2,"name":"Aloe"}`, `{"name":"Aloe"}`},
			{"empty tag is a tag", `{"id":3,"name":"Fern","tag":""}`, `{"name":"Fern","tag":""}`},
			{"unknown members ignored", `{"id":4,"name":"Ivy","Name":"x","ID":9,"extra":{"a":[1,{"b":null}]}}`, `{"name":"Ivy"}`},
			{"members in any order", `{"tag":"t","name":"Palm","id":5}`, `{"name":"Palm","tag":"t"}`},
			{"unicode and escapes", `{"id":6,"name":"Fic\u00fcs 🌿 \"quoted\""}`, `{"name":"Ficüs 🌿 \"quoted\""}`},
			{"whitespace around the object", " \n\t{\"id\":7,\"name\":\"Cactus\"}\r\n ", `{"name":"Cactus"}`},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				resp, body := e.create(tc.body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
				if string(body) != tc.want {
					t.Errorf("body %s, want %s", body, tc.want)
				}
			})
		}
		if p, ok := e.stored(3); !ok || p.Tag == nil || *p.Tag != "" {
			t.Errorf("plant 3 stored as %v", p)
		}
		if p, ok := e.stored(2); !ok || p.Tag != nil {
			t.Errorf("plant 2 stored as %v", p)
		}
	})
}

func TestCreateIDRange(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		for _, tc := range []struct {
			raw  string
			want int64
		}{
			{"9223372036854775807", 1<<63 - 1},
			{"-9223372036854775808", -1 << 63},
			{"0", 0},
			{"-0", 0},
			{"7.0", 7},
			{"1e3", 1000},
		} {
			resp, body := e.create(fmt.Sprintf(`{"id":%s,"name":"n%d"}`, tc.raw, tc.want))
			if resp.StatusCode != http.StatusOK {
				t.Errorf("id %s: status %d %s", tc.raw, resp.StatusCode, body)
				continue
			}
			if p, ok := e.stored(tc.want); !ok || p.Name != fmt.Sprintf("n%d", tc.want) {
				t.Errorf("id %s: stored %v, %v", tc.raw, p, ok)
			}
		}
	})
}

func TestCreateIdempotentReplay(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		body := `{"id":10,"name":"Basil","tag":"herb"}`
		resp1, b1 := e.create(body)
		resp2, b2 := e.create(`{"tag":"herb","id":10.0,"name":"Basil"}`)
		if resp1.StatusCode != 200 || resp2.StatusCode != 200 || string(b1) != string(b2) {
			t.Errorf("create then replay: %d %s, %d %s", resp1.StatusCode, b1, resp2.StatusCode, b2)
		}
	})
}

func TestCreateConflictChangesNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		if resp, body := e.create(`{"id":11,"name":"Mint","tag":"herb"}`); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		for _, other := range []string{
			`{"id":11,"name":"Mint"}`,
			`{"id":11,"name":"Mint","tag":""}`,
			`{"id":11,"name":"Mint","tag":"weed"}`,
			`{"id":11,"name":"mint","tag":"herb"}`,
		} {
			resp, body := e.create(other)
			wantError(t, resp, body, http.StatusConflict, "11", "already exists")
		}
		if p, _ := e.stored(11); p.Name != "Mint" || p.Tag == nil || *p.Tag != "herb" {
			t.Errorf("after conflicts plant 11 is %v", p)
		}
	})
}

func TestConcurrentCreatesOfOneID(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		const n = 24
		statuses := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				// Not e.create, which ends the test with Fatal on a
				// transport error: only the test's goroutine may.
				req, _ := http.NewRequest("POST", e.url+"/plants", strings.NewReader(fmt.Sprintf(`{"id":12,"name":"contender %d"}`, i)))
				req.Header.Set("Authorization", "Bearer "+e.writeToken)
				req.Header.Set("Content-Type", "application/json")
				resp, err := e.client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				statuses[i] = resp.StatusCode
			})
		}
		wg.Wait()
		winner := -1
		for i, s := range statuses {
			switch s {
			case 200:
				if winner >= 0 {
					t.Fatalf("contenders %d and %d both got 200", winner, i)
				}
				winner = i
			case 409:
			default:
				t.Errorf("contender %d got %d", i, s)
			}
		}
		if winner < 0 {
			t.Fatal("no contender got 200")
		}
		if p, _ := e.stored(12); p.Name != fmt.Sprintf("contender %d", winner) {
			t.Errorf("stored %q but contender %d got 200", p.Name, winner)
		}
	})
}

// Every kind of bad input gets 400 with an Error that says what is wrong,
// and stores nothing. Each body would create plant 42 if it were accepted.
func TestBadInputStoresNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		cases := []struct {
			name, body string
			words      []string
		}{
			{"empty body", ``, []string{"empty"}},
			{"malformed JSON", `{"id":42,"name":"a"`, []string{"malformed JSON"}},
			{"single quotes", `{'id':42,'name':'a'}`, []string{"malformed JSON"}},
			{"trailing comma", `{"id":42,"name":"a",}`, []string{"malformed JSON"}},
			{"data after the object", `{"id":42,"name":"a"} x`, []string{"after the JSON object"}},
			{"second object", `{"id":42,"name":"a"}{"id":43,"name":"b"}`, []string{"after the JSON object"}},
			{"array", `[{"id":42,"name":"a"}]`, []string{"JSON object", "array"}},
			{"string", `"plant"`, []string{"JSON object", "string"}},
			{"number", `42`, []string{"JSON object"}},
			{"null", `null`, []string{"JSON object", "null"}},
			{"byte order mark", "\ufeff{\"id\":42,\"name\":\"a\"}", []string{"malformed JSON"}},
			{"missing id", `{"name":"a"}`, []string{"id", "missing"}},
			{"missing name", `{"id":42}`, []string{"name", "missing"}},
			{"names are case-sensitive", `{"ID":42,"Name":"a","id":42}`, []string{"name", "missing"}},
			{"string id", `{"id":"42","name":"a"}`, []string{"id", "integer"}},
			{"fractional id", `{"id":42.5,"name":"a"}`, []string{"id", "integer"}},
			{"tiny fraction", `{"id":42.0000000000000001,"name":"a"}`, []string{"id", "integer"}},
			{"negative exponent fraction", `{"id":425e-1,"name":"a"}`, []string{"id", "integer"}},
			{"id beyond int64", `{"id":9223372036854775808,"name":"a"}`, []string{"id", "9223372036854775807"}},
			{"id below int64", `{"id":-9223372036854775809,"name":"a"}`, []string{"id"}},
			{"id huge exponent", `{"id":1e400,"name":"a"}`, []string{"id"}},
			{"id null", `{"id":null,"name":"a"}`, []string{"id", "null"}},
			{"id bool", `{"id":true,"name":"a"}`, []string{"id"}},
			{"null name", `{"id":42,"name":null}`, []string{"name", "string", "null"}},
			{"numeric name", `{"id":42,"name":7}`, []string{"name", "string"}},
			{"object name", `{"id":42,"name":{"x":1}}`, []string{"name", "string"}},
			{"null tag", `{"id":42,"name":"a","tag":null}`, []string{"tag", "string"}},
			{"array tag", `{"id":42,"name":"a","tag":["x"]}`, []string{"tag", "string"}},
			{"invalid UTF-8", "{\"id\":42,\"name\":\"a\xff\"}", []string{"UTF-8"}},
			{"invalid UTF-8 in unknown member", "{\"id\":42,\"name\":\"a\",\"x\":\"\xc3\"}", []string{"UTF-8"}},
			{"lone surrogate", `{"id":42,"name":"a\ud800"}`, []string{"surrogate"}},
			{"duplicate name", `{"id":42,"name":"a","name":"b"}`, []string{"duplicate"}},
			{"duplicate id", `{"id":42,"id":42,"name":"a"}`, []string{"duplicate"}},
			{"duplicate in unknown member", `{"id":42,"name":"a","x":{"k":1,"k":2}}`, []string{"duplicate"}},
			{"NUL in name", `{"id":42,"name":"a\u0000b"}`, []string{"name", "control"}},
			{"newline in name", `{"id":42,"name":"a\nb"}`, []string{"name", "control"}},
			{"C1 control in tag", `{"id":42,"name":"a","tag":"x\u0085"}`, []string{"tag", "control"}},
			{"DEL in tag", `{"id":42,"name":"a","tag":"x\u007f"}`, []string{"tag", "control"}},
			{"empty name", `{"id":42,"name":""}`, []string{"name", "1 to 200"}},
			{"name too long", `{"id":42,"name":"` + strings.Repeat("n", 201) + `"}`, []string{"name", "201"}},
			{"multibyte name too long", `{"id":42,"name":"` + strings.Repeat("é", 201) + `"}`, []string{"name", "201"}},
			{"tag too long", `{"id":42,"name":"a","tag":"` + strings.Repeat("t", 101) + `"}`, []string{"tag", "101"}},
			{"deep nesting", `{"id":42,"name":"a","x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, []string{"malformed JSON"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				resp, body := e.create(tc.body)
				wantError(t, resp, body, http.StatusBadRequest, tc.words...)
				if _, ok := e.stored(42); ok {
					t.Fatal("plant 42 was stored")
				}
			})
		}
	})
}

func TestLengthLimitsCountCharacters(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		e := start(t, options{})
		name := strings.Repeat("é", 200) // 400 bytes, 200 characters
		tag := strings.Repeat("🌵", 100)
		resp, body := e.create(fmt.Sprintf(`{"id":1,"name":%q,"tag":%q}`, name, tag))
		if resp.StatusCode != 200 {
			t.Fatalf("200-character name, 100-character tag: %d %s", resp.StatusCode, body)
		}
		var got struct{ Name, Tag string }
		json.Unmarshal(body, &got)
		if got.Name != name || got.Tag != tag {
			t.Error("answer does not carry the name and tag sent")
		}
	})
}
