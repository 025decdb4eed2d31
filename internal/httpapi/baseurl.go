package httpapi

import (
	"net/http"
	"net/netip"
	"strings"
)

// baseURL is where the client reached the API, for absolute links (the
// next page) and the served document's servers: --public-url when set;
// else the connection's scheme and the request's Host, or, when the
// request comes from a trusted proxy, the scheme and host that proxy says
// the client used (X-Forwarded-Proto and X-Forwarded-Host, or Forwarded's
// proto and host, the nearest proxy's word winning). "" when the request
// names no usable host: then links stay relative to the request.
//
// A path prefix added by a proxy cannot be known from the request:
// behind one, set --public-url.
func (s *Server) baseURL(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return s.cfg.PublicURL
	}
	scheme, host := "http", r.Host
	if s.cfg.TLS {
		scheme = "https"
	}
	if len(s.cfg.TrustedProxies) > 0 {
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && s.trustedProxy(ap.Addr().Unmap()) {
			if proto, fhost := forwarded(r.Header); proto != "" || fhost != "" {
				if proto == "http" || proto == "https" {
					scheme = proto
				}
				if validHost(fhost) {
					host = fhost
				}
			}
		}
	}
	if !validHost(host) {
		return ""
	}
	return scheme + "://" + host
}

// forwarded reads the scheme and host a proxy says the client asked for:
// the last X-Forwarded-Proto and X-Forwarded-Host entries, which the
// nearest proxy wrote, or else the last element of Forwarded (RFC 7239).
func forwarded(h http.Header) (proto, host string) {
	proto, host = lastEntry(h.Values("X-Forwarded-Proto")), lastEntry(h.Values("X-Forwarded-Host"))
	if proto != "" || host != "" {
		return strings.ToLower(proto), host
	}
	elements := lastEntry(h.Values("Forwarded"))
	for pair := range strings.SplitSeq(elements, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(pair), "=")
		value = strings.Trim(value, `"`)
		switch strings.ToLower(name) {
		case "proto":
			proto = strings.ToLower(value)
		case "host":
			host = value
		}
	}
	return proto, host
}

// lastEntry is the last comma-separated entry of header values.
func lastEntry(values []string) string {
	if len(values) == 0 {
		return ""
	}
	last := values[len(values)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	return strings.TrimSpace(last)
}

// validHost accepts a host[:port] fit to put in a URL: letters, digits and
// the characters of names, IPv4 and bracketed IPv6 addresses and ports.
func validHost(host string) bool {
	if host == "" || len(host) > 255 {
		return false
	}
	for _, c := range host {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("-._:[]", c)) {
			return false
		}
	}
	return true
}
