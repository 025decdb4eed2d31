package httpapi

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strconv"
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

// validHost tells whether host, a Host header's value or a proxy's word
// for it, is a host[:port] fit to put in a URL (RFC 3986, section 3.2): a
// name of letters, digits and "-._~", an IPv4 address, or a bracketed IPv6
// address without a zone; then, optionally, ":" and a port of at most
// 65535.
func validHost(host string) bool {
	if host == "" || len(host) > 255 {
		return false
	}
	name, port := host, ""
	if host[0] == '[' {
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return false
		}
		if a, err := netip.ParseAddr(host[1:end]); err != nil || !a.Is6() || a.Zone() != "" {
			return false
		}
		name, port = "", host[end+1:]
		if port != "" {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
		}
	} else {
		if i := strings.LastIndexByte(host, ':'); i >= 0 {
			name, port = host[:i], host[i+1:]
		}
		if name == "" {
			return false
		}
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("-._~", c)) {
			return false
		}
	}
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		return err == nil && len(port) <= 5 && n <= 65535
	}
	return true
}

// reachedHost is the local address of the connection of a request whose
// context is ctx, as a Host ("" if unknown).
func reachedHost(ctx context.Context) string {
	addr, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return ""
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return ""
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
}
