// Package docs serves the API reference page: Redoc, rendering the OpenAPI
// document the service serves. Redoc's bundle is embedded (taken from the
// npm registry by ./fetch, pinned and checked), so the page needs no
// internet access. Redoc would report usage to Redocly and fetch its logo
// from a CDN: the page turns the telemetry off, and its
// Content-Security-Policy lets it load nothing from anywhere but this
// service.
package docs

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"html/template"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/plantstore/plantstore/internal/accept"
)

//go:generate go run ./fetch -dir .

//go:embed redoc.standalone.js.gz
var bundleGz []byte

// License is Redoc's licence (MIT), shipped with its bundle.
//
//go:embed redoc.LICENSE
var License string

// RedocVersion is the embedded Redoc release.
const RedocVersion = "3.0.1"

// BundlePath is where the page loads Redoc from. The version is in the
// path, so the bundle can be cached for good.
const BundlePath = "/docs/redoc-" + RedocVersion + ".standalone.js"

// page links its script and the document relatively, so it works under a
// path prefix too (a proxy serving the API at /store/ serves the page at
// /store/docs and everything it loads beside it).
var page = template.Must(template.New("docs").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>body { margin: 0; padding: 0; }</style>
</head>
<body>
<redoc spec-url="openapi.json" disable-telemetry="true" schema-definitions-tag-name="schemas" expand-responses="200,201,204" path-in-middle-panel></redoc>
<script type="module" src="{{.Bundle}}"></script>
</body>
</html>
`))

// Page serves the reference page (GET /docs).
func Page(title string) http.Handler {
	var b bytes.Buffer
	if err := page.Execute(&b, struct{ Title, Bundle string }{title, strings.TrimPrefix(BundlePath, "/")}); err != nil {
		panic(err) // a constant template and two strings
	}
	html := b.Bytes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		// Only this origin's scripts, none inline; Redoc's styles are
		// inline, and it renders in workers it makes from blobs.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:")
		h.Set("Content-Length", strconv.Itoa(len(html)))
		w.Write(html)
	})
}

// Bundle serves Redoc's script (GET BundlePath): gzipped as embedded to a
// client that accepts gzip, which every browser does, and decompressed
// once, on first need, for one that does not.
func Bundle() http.Handler {
	plain := sync.OnceValue(func() []byte {
		zr, err := gzip.NewReader(bytes.NewReader(bundleGz))
		if err != nil {
			panic(err) // the embedded file is checked by the tests
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			panic(err)
		}
		return b
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
		h.Add("Vary", "Accept-Encoding")
		body := bundleGz
		if accept.Gzip(r.Header.Values("Accept-Encoding")) {
			h.Set("Content-Encoding", "gzip")
		} else {
			body = plain()
		}
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
}

// index is the page a browser gets at GET /: where the reference and the
// document are, linked relatively so it works under a path prefix too.
var index = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
</head>
<body>
<h1>{{.Title}}</h1>
<p>This is an API: its plants are at <code>{{.Base}}/plants</code>, for a bearer token.</p>
<ul>
<li><a href="{{.Base}}/docs">The API reference</a></li>
<li><a href="{{.Base}}/openapi.json">The OpenAPI document</a> (also <a href="{{.Base}}/openapi.yaml">as YAML</a>)</li>
</ul>
</body>
</html>
`))

// Index serves the page a browser gets at the service's root, its links
// under base: the service's base URL, which keeps a proxy's path prefix
// (a link relative to ".../v1" would leave it), or "" for links from the
// root of the host the page came from.
func Index(title, base string) http.Handler {
	var b bytes.Buffer
	if err := index.Execute(&b, struct{ Title, Base string }{title, base}); err != nil {
		panic(err) // a constant template and a string
	}
	html := b.Bytes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", "default-src 'none'")
		h.Set("Content-Length", strconv.Itoa(len(html)))
		w.Write(html)
	})
}
