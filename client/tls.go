package client

import (
	"crypto/tls"
	"errors"
	"net/http"
)

// WithTLSConfig makes the client use cfg for HTTPS: for a service whose
// certificate comes from a private CA, set cfg.RootCAs to a pool holding
// that CA (x509.NewCertPool, then AppendCertsFromPEM). It applies to the
// transport of WithHTTPClient's client (or http.DefaultClient's), which
// must then be an *http.Transport: the client works on a copy of both,
// and sets nothing on either. (Go's Transport.Clone may first fill in the
// original's own defaults for HTTP/2, a nil TLSClientConfig among them,
// as the transport would at its first HTTPS request.) (Without it, Go
// reads the system's roots, and the
// SSL_CERT_FILE and SSL_CERT_DIR variables on Unix, which also works.)
func WithTLSConfig(cfg *tls.Config) Option { return func(c *Client) { c.tls = cfg } }

// applyTLS puts c.tls into a copy of c.http and its transport.
func (c *Client) applyTLS() error {
	if c.tls == nil {
		return nil
	}
	rt := c.http.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	t, ok := rt.(*http.Transport)
	if !ok {
		return errors.New("plantstore: WithTLSConfig needs the HTTP client's Transport to be an *http.Transport; set TLSClientConfig on yours instead")
	}
	t = t.Clone()
	t.TLSClientConfig = c.tls.Clone()
	h := *c.http
	h.Transport = t
	c.http = &h
	return nil
}
