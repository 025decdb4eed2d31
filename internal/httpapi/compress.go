package httpapi

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"sync"

	"github.com/plantstore/plantstore/internal/accept"
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

// acceptsGzip tells whether r's Accept-Encoding takes gzip (accept.Gzip).
func acceptsGzip(r *http.Request) bool { return accept.Gzip(r.Header.Values("Accept-Encoding")) }

// varyEncoding marks every answer of a route whose answers may be
// gzipped, its errors and 304s included: a cache must key them on
// Accept-Encoding.
func varyEncoding(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		h.ServeHTTP(w, r)
	})
}
