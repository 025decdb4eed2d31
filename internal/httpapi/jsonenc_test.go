package httpapi

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json"

	"github.com/plantstore/plantstore"
)

// The hand-written encoders must write exactly what json.Marshal writes.
func TestAppendMatchesMarshal(t *testing.T) {
	tag, empty, odd := "tropical", "", "a \"quoted\" \\ tab\t nl\n nul\x00 del\x7f <&> \u2028 é 🌿"
	values := []jsonAppender{
		plantBody{Name: "Fern"},
		plantBody{Name: "Fern", Tag: &tag},
		plantBody{Name: odd, Tag: &empty},
		storedPlantBody{ID: -1 << 63, Name: "x", Tag: &odd},
		storedPlantBody{ID: 1<<63 - 1, Name: odd},
		plantPage{},
		plantPage{{ID: 1, Name: "a"}, {ID: 2, Name: odd, Tag: &tag}},
		errorBody{Error: 404, Message: "plant 7 not found"},
		errorBody{Error: 400, Message: odd},
		statusBody{Status: "ok"},
	}
	for _, v := range values {
		want, err := json.Marshal(marshalForm(v))
		if err != nil {
			t.Fatal(err)
		}
		if got := v.appendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("%#v:\n got %s\nwant %s", v, got, want)
		}
	}
}

// marshalForm is v as json.Marshal sees it: a page is a slice of
// storedPlantBody.
func marshalForm(v jsonAppender) any {
	if page, ok := v.(plantPage); ok {
		bodies := make([]storedPlantBody, len(page))
		for i, p := range page {
			bodies[i] = storedPlant(p)
		}
		return bodies
	}
	return v
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\/", "\x00\x01\x1f\x7f", "\u2028\u2029", "<script>&", "é🌿", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := appendJSONString(nil, s)
		if !utf8.ValidString(s) {
			// json.Marshal refuses invalid UTF-8; we write U+FFFD for
			// each invalid byte, as ranging over the string reads it.
			var valid strings.Builder
			for _, r := range s {
				valid.WriteRune(r)
			}
			want, _ := json.Marshal(valid.String())
			if !bytes.Equal(got, want) {
				t.Fatalf("%q: got %s, want %s", s, got, want)
			}
			return
		}
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	})
}

// FuzzScanPlant checks the fast path of decodeMembers against the token
// walk: whatever it accepts, the walk accepts and reads the same way.
func FuzzScanPlant(f *testing.F) {
	for _, body := range seedBodies() {
		f.Add([]byte(body))
	}
	for _, body := range []string{
		`{"id":1,"name":"Fern"}`, ` {"name":"Fern","tag":"","id":-0} `, `{"id":123456789012345678,"name":"é"}`,
		`{"id":1234567890123456789,"name":"x"}`, `{"id":01,"name":"x"}`, `{"id":1.0,"name":"x"}`, `{"id":1e2,"name":"x"}`,
		`{"id":1,"name":"x","name":"y"}`, `{"id":1,"name":"x",}`, `{"id":1,"name":"x\u0041"}`, `{"name":"\xff"}`,
		`{"name":"x"}x`, `{"name":"x"}{}`, `{"tag":null,"name":"x"}`, `{"id":-,"name":"x"}`, `{"Name":"x"}`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, haveID, ok := scanPlant(body)
		if !ok {
			return
		}
		// The walk, without the fast path in front of it.
		want, wantID, err := walkPlant(body, "NewPlant")
		if err != nil {
			t.Fatalf("the fast path read %q as %v, the walk refuses it: %v", body, p, err)
		}
		if haveID != wantID || !p.SameContent(want) {
			t.Fatalf("%q: the fast path read %v (id present %v), the walk %v (%v)", body, p, haveID, want, wantID)
		}
	})
}

func TestScanPlantReadsCommonBodies(t *testing.T) {
	for body, want := range map[string]plantstore.Plant{
		`{"id":42,"name":"Monstera deliciosa","tag":"tropical"}`: {ID: 42, Name: "Monstera deliciosa", Tag: new("tropical")},
		"{ \"name\" : \"Fern\" ,\n\t\"id\" : -7 }":               {ID: -7, Name: "Fern"},
		`{"id":0,"name":"é 🌿","tag":""}`:                         {ID: 0, Name: "é 🌿", Tag: new("")},
	} {
		p, _, ok := scanPlant([]byte(body))
		if !ok || !p.SameContent(want) {
			t.Errorf("scanPlant(%s) = %v, %v; want %v", body, p, ok, want)
		}
	}
}

func BenchmarkWritePlant(b *testing.B) {
	tag := "tropical"
	p := storedPlantBody{ID: 123456789, Name: "Monstera deliciosa", Tag: &tag}
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf = p.appendJSON(buf[:0])
	}
}
