package main

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"unicode/utf8"
)

// The bare baseline: what any HTTP service of this API's shape must do at
// the least, with no storage. It checks the bearer header, decodes and
// validates the JSON body, and encodes an answer. The harness runs it in a
// process of its own, as it runs plantstore, so both pay the same costs
// of loopback and scheduling.

type baselinePlant struct {
	ID   *int64  `json:"id,omitempty"`
	Name *string `json:"name"`
	Tag  *string `json:"tag,omitempty"`
}

func baselineHandler(token string) http.Handler {
	want := []byte("Bearer " + token)
	fail := func(w http.ResponseWriter, status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"error": status, "message": msg})
	}
	// authorized answers 401 unless the request carries the token.
	authorized := func(next http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				fail(w, 401, "unauthorized")
				return
			}
			next(w, r)
		}
	}
	name, tag := "a fixed plant", "fixed"
	fixed := baselinePlant{ID: new(int64), Name: &name, Tag: &tag}
	page := make([]baselinePlant, 100)
	for i := range page {
		id := int64(i + 1)
		page[i] = baselinePlant{ID: &id, Name: &name, Tag: &tag}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /plants", authorized(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			fail(w, 415, "unsupported media type")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
		if err != nil {
			fail(w, 413, "too large")
			return
		}
		var p baselinePlant
		if err := json.Unmarshal(body, &p); err != nil || p.ID == nil || p.Name == nil {
			fail(w, 400, "bad plant")
			return
		}
		if n := utf8.RuneCountInString(*p.Name); n < 1 || n > 200 || (p.Tag != nil && utf8.RuneCountInString(*p.Tag) > 100) {
			fail(w, 400, "bad length")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(baselinePlant{Name: p.Name, Tag: p.Tag})
	}))
	mux.HandleFunc("GET /plants/{id}", authorized(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(fixed)
	}))
	mux.HandleFunc("GET /plants", authorized(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(page)
	}))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ready"}`)
	})
	return mux
}

// serveBaseline is the baseline process: it listens on loopback, says
// where on stdout, and serves until killed.
func serveBaseline(token string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println("gomaxprocs", runtime.GOMAXPROCS(0)) // for the harness's output
	fmt.Println("listening", ln.Addr().String())
	return http.Serve(ln, baselineHandler(token))
}
