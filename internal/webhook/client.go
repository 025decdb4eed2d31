package webhook

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrForbiddenAddress is the error, wrapped with the address, of a connection
// that the client refused to open because the address is internal (loopback,
// private, link-local, cloud metadata and the like). Subscribers choose the
// URL we post to, so without this check a webhook would let them probe our
// own network.
var ErrForbiddenAddress = errors.New("webhook address not allowed: loopback, private, link-local or reserved")

const (
	userAgent        = "plantstore-webhooks/1"
	defaultTimeout   = 10 * time.Second
	maxURLBytes      = 2048
	maxResponseBytes = 64 << 10
)

// ClientOptions tune NewClient. The zero value is what production wants.
type ClientOptions struct {
	// AllowPrivate lets the client connect to internal addresses: for tests
	// and for a deployment whose subscribers are on its own network.
	AllowPrivate bool
	// Timeout bounds one delivery attempt, from dialling to the end of the
	// answer, so a slow subscriber cannot hold a sender. Default 10 s.
	Timeout time.Duration
}

// NewClient returns the HTTP client that deliveries must use. Unless
// opts.AllowPrivate, it checks every address it is about to connect to,
// after DNS resolution, so a hostname that resolves (or later re-resolves)
// to an internal address is refused with ErrForbiddenAddress. For the same
// reason it ignores proxy settings in the environment (a proxy would make the
// connection for us, unchecked) and never follows a redirect: a 3xx answer is
// a failed attempt, not a way to send our signed message somewhere else.
func NewClient(opts ClientOptions) *http.Client {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if !opts.AllowPrivate {
		dialer.Control = refuseForbidden
	}
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true, // a custom dialer turns HTTP/2 off unless asked
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: maxResponseBytes,
		DisableCompression:     true, // the answer's body is discarded unread
		MaxIdleConns:           64,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
	}
	return &http.Client{
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
		Timeout: timeout,
	}
}

// refuseForbidden is the dialer's Control hook: it runs once the address is
// resolved and the socket exists, just before connect, so it sees the very
// address the connection goes to.
func refuseForbidden(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse %q", ErrForbiddenAddress, address)
	}
	if forbidden(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrForbiddenAddress, ap.Addr())
	}
	return nil
}

// forbiddenPrefixes are the ranges a webhook may not reach: addresses that
// are not on the public internet, where our own services and the cloud's
// metadata endpoints live.
var forbiddenPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network", with 0.0.0.0
	netip.MustParsePrefix("10.0.0.0/8"),     // private (RFC 1918)
	netip.MustParsePrefix("100.64.0.0/10"),  // carrier-grade NAT (RFC 6598)
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, with 169.254.169.254 metadata
	netip.MustParsePrefix("172.16.0.0/12"),  // private (RFC 1918)
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("192.168.0.0/16"), // private (RFC 1918)
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking, often used inside networks
	netip.MustParsePrefix("224.0.0.0/4"),    // multicast
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, with broadcast 255.255.255.255

	netip.MustParsePrefix("::/128"),            // unspecified
	netip.MustParsePrefix("::1/128"),           // loopback
	netip.MustParsePrefix("fc00::/7"),          // unique local (ULA)
	netip.MustParsePrefix("fd00:ec2::254/128"), // AWS metadata over IPv6 (inside fc00::/7; named for the record)
	netip.MustParsePrefix("fe80::/10"),         // link-local
	netip.MustParsePrefix("fec0::/10"),         // site-local, deprecated but still routed in places
	netip.MustParsePrefix("ff00::/8"),          // multicast
}

// forbidden reports whether a webhook may not connect to ip. IPv6 forms
// that carry an IPv4 address (mapped ::ffff:a.b.c.d, compatible ::a.b.c.d)
// are judged by that IPv4 address, so ::ffff:127.0.0.1 is loopback.
func forbidden(ip netip.Addr) bool {
	if !ip.IsValid() {
		return true
	}
	// A prefix never contains an address with a zone, so drop it first or
	// fe80::1%eth0 would slip through.
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		b := ip.As16()
		if [12]byte(b[:12]) == [12]byte{} {
			ip = netip.AddrFrom4([4]byte(b[12:])) // IPv4-compatible; :: and ::1 land in 0.0.0.0/8
		}
	}
	for _, p := range forbiddenPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// CheckURL reports whether raw may be stored as a subscriber's URL: an
// absolute http or https URL with a host, no user info (credentials in a URL
// end up in logs), no fragment, at most 2048 bytes. It does not refuse
// literal internal addresses such as http://10.0.0.5/: whether those are
// reachable is decided when connecting, by ClientOptions.AllowPrivate, which
// also catches hostnames that resolve to them. Its errors never repeat the
// URL, which may hold a token in its query.
func CheckURL(raw string) error {
	if len(raw) > maxURLBytes {
		return fmt.Errorf("webhook URL: %d bytes, at most %d allowed", len(raw), maxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // url.Error repeats the URL
		}
		return fmt.Errorf("webhook URL: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("webhook URL: must be an absolute http:// or https:// URL")
	case u.Opaque != "" || u.Hostname() == "":
		return errors.New("webhook URL: has no host")
	case u.User != nil:
		return errors.New("webhook URL: must not contain user info (user:password@); credentials in URLs end up in logs")
	case strings.Contains(raw, "#"):
		return errors.New("webhook URL: must not contain a fragment (#...)")
	}
	return nil
}
