package httpapi

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"sync"
)

// Compression: an answer over compressAbove bytes is sent gzipped to a
// client that accepts gzip: pages of plants and events, a single plant
// with a long name (its strong ETag then has a variant of its own,
// gzipETag), and the documents. Errors are never compressed; every
// answer of those routes, errors included, carries Vary:
// Accept-Encoding (varyEncoding). BestSpeed, because a page
// is compressed afresh each time and its CPU is the request's: on a
// 100-plant page it costs a few µs and takes the body from about 4.8 KB
// to about 0.7 KB (BenchmarkLayer/gzip-page). The standard library's gzip
// suffices; zstd would need a dependency for little on bodies this size.
const compressAbove = 1024

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

// gzipTo appends body, gzipped, to dst.
func gzipTo(dst []byte, body []byte) []byte {
	buf := bytes.NewBuffer(dst)
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(buf)
	zw.Write(body)
	zw.Close()
	zw.Reset(nil) // drop the buffer: the pool holds only the compressor
	gzipWriters.Put(zw)
	return buf.Bytes()
}

// acceptsGzip tells whether r's Accept-Encoding takes gzip (RFC 9110,
// section 12.5.3): gzip or x-gzip listed with a q above 0, or, when
// neither is listed, * with a q above 0. A q that does not parse counts
// as 0: the answer goes plain, which every client takes.
func acceptsGzip(r *http.Request) bool {
	named, star := -1.0, -1.0 // the best q of gzip and of *; -1: not listed
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding != "gzip" && coding != "x-gzip" && coding != "*" {
				continue
			}
			q, ok := quality(params)
			if !ok {
				q = 0
			}
			if coding == "*" {
				star = max(star, q)
			} else {
				named = max(named, q)
			}
		}
	}
	if named >= 0 {
		return named > 0
	}
	return star > 0
}

// varyEncoding marks every answer of a route whose answers may be
// gzipped, its errors and 304s included: a cache must key them on
// Accept-Encoding.
func varyEncoding(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		h.ServeHTTP(w, r)
	})
}
