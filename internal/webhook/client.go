package webhook

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
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
	// and for a deployment whose subscribers are on its own network. It does
	// not open the cloud metadata endpoints; see AllowMetadata.
	AllowPrivate bool
	// AllowMetadata lets the client connect to the cloud metadata and
	// credential endpoints (169.254.0.0/16, fd00:ec2::/64 and the few others
	// in metadataPrefixes). They hand out the instance's credentials to
	// whoever asks, so a subscriber on your own network (AllowPrivate) is
	// still kept from them unless this is set too.
	AllowMetadata bool
	// Timeout bounds one delivery attempt, from dialling to the end of the
	// answer, so a slow subscriber cannot hold a sender. Default 10 s.
	Timeout time.Duration
	// IdlePerHost is how many connections to one host are kept open
	// between attempts: the dispatcher's Concurrency, so that its attempts
	// reuse their connections instead of dialling (and checking the
	// address) each time. Default DefaultConcurrency.
	IdlePerHost int
}

// NewClient returns the HTTP client that deliveries must use. It checks
// every address it is about to connect to, after DNS resolution, so a
// hostname that resolves (or later re-resolves) to an internal address is
// refused with ErrForbiddenAddress (unless opts allow that kind of
// address). For the same reason it ignores proxy settings in the
// environment (a proxy would make the connection for us, unchecked) and
// never follows a redirect: a 3xx answer is a failed attempt, not a way to
// send our signed message somewhere else.
func NewClient(opts ClientOptions) *http.Client {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	idle := opts.IdlePerHost
	if idle <= 0 {
		idle = DefaultConcurrency
	}
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            newDialer(opts, timeout).DialContext,
		ForceAttemptHTTP2:      true, // a custom dialer turns HTTP/2 off unless asked
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: maxResponseBytes,
		DisableCompression:     true, // the answer's body is discarded unread
		MaxIdleConns:           max(64, 4*idle),
		MaxIdleConnsPerHost:    idle,
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

// newDialer is NewClient's dialer, apart so that tests can call its
// Control hook without connecting anywhere.
func newDialer(opts ClientOptions, timeout time.Duration) *net.Dialer {
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if !opts.AllowPrivate || !opts.AllowMetadata {
		g := guard{allowPrivate: opts.AllowPrivate, allowMetadata: opts.AllowMetadata}
		dialer.Control = g.control
	}
	return dialer
}

// guard decides which addresses a delivery may connect to.
type guard struct{ allowPrivate, allowMetadata bool }

// control is the dialer's Control hook: it runs once the address is
// resolved and the socket exists, just before connect, so it sees the very
// address the connection goes to.
func (g guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse %q", ErrForbiddenAddress, address)
	}
	return CheckAddress(ap.Addr(), ClientOptions{AllowPrivate: g.allowPrivate, AllowMetadata: g.allowMetadata})
}

// CheckAddress says whether a client made with opts may connect to ip:
// nil, or an error wrapping ErrForbiddenAddress that names the serve flag
// which would allow it, so that the operator reading it in webhook list
// or a log knows what to change (or that they must not). The client
// checks every address it dials with it; webhook add uses it to warn.
func CheckAddress(ip netip.Addr, opts ClientOptions) error {
	switch classify(ip) {
	case classMetadata:
		if !opts.AllowMetadata {
			return fmt.Errorf("%w: %s is a cloud metadata address (only serve --allow-metadata-webhooks allows it)", ErrForbiddenAddress, ip)
		}
	case classPrivate:
		if !opts.AllowPrivate {
			return fmt.Errorf("%w: %s (serve --allow-private-webhooks allows it)", ErrForbiddenAddress, ip)
		}
	}
	return nil
}

// addrClass is what an address is to the guard, from least to most
// guarded.
type addrClass int

const (
	classPublic   addrClass = iota
	classPrivate            // not on the public internet: AllowPrivate
	classMetadata           // cloud metadata and credentials: AllowMetadata
)

// metadataPrefixes are where clouds serve an instance's metadata and
// credentials to whoever asks from inside it. They are kept apart from the
// other internal ranges because reaching them from a webhook gives away
// the machine's cloud credentials, which no subscriber on one's own
// network needs.
var metadataPrefixes = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local: 169.254.169.254 (AWS, GCP, Azure, Oracle, OpenStack...), 169.254.170.2 (ECS credentials), 169.254.170.23 (EKS Pod Identity)
	netip.MustParsePrefix("fd00:ec2::/64"),      // AWS over IPv6: fd00:ec2::254 (metadata), ::23 (EKS Pod Identity), ::253 (DNS)
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud metadata
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure WireServer: a public address that only Azure VMs reach
	netip.MustParsePrefix("192.0.0.192/32"),     // Oracle Cloud metadata, older address
}

// privatePrefixes are the other ranges a webhook may not reach: addresses
// that are not on the public internet, where our own services live, and
// reserved ranges nothing legitimate answers on.
var privatePrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network", with 0.0.0.0
	netip.MustParsePrefix("10.0.0.0/8"),      // private (RFC 1918)
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT (RFC 6598)
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("172.16.0.0/12"),   // private (RFC 1918)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation (TEST-NET-1)
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast, deprecated
	netip.MustParsePrefix("192.168.0.0/16"),  // private (RFC 1918)
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking, often used inside networks
	netip.MustParsePrefix("198.51.100.0/24"), // documentation (TEST-NET-2)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation (TEST-NET-3)
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, with broadcast 255.255.255.255

	netip.MustParsePrefix("::/128"),         // unspecified
	netip.MustParsePrefix("::1/128"),        // loopback
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64 (RFC 8215); its IPv4 part is judged too
	netip.MustParsePrefix("100::/64"),       // discard-only (RFC 6666)
	netip.MustParsePrefix("100:0:0:1::/64"), // dummy prefix (RFC 9780)
	netip.MustParsePrefix("2001:2::/48"),    // benchmarking
	netip.MustParsePrefix("2001:10::/28"),   // ORCHID, deprecated
	netip.MustParsePrefix("2001:20::/28"),   // ORCHIDv2
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
	netip.MustParsePrefix("3fff::/20"),      // documentation (RFC 9637)
	netip.MustParsePrefix("5f00::/16"),      // SRv6 SIDs (RFC 9602)
	netip.MustParsePrefix("fc00::/7"),       // unique local (ULA)
	netip.MustParsePrefix("fe80::/10"),      // link-local
	netip.MustParsePrefix("fec0::/10"),      // site-local, deprecated but still routed in places
	netip.MustParsePrefix("ff00::/8"),       // multicast
}

// classify says what ip is. An IPv6 address that carries an IPv4 address
// (see embeddedIPv4) is judged by that IPv4 address too, as the packets may
// end up there: 64:ff9b::169.254.169.254 reaches the metadata endpoint
// through a NAT64 gateway, 2002:7f00:1:: loopback through a 6to4 relay.
func classify(ip netip.Addr) addrClass {
	if !ip.IsValid() {
		return classPrivate
	}
	// A prefix never contains an address with a zone, so drop it first or
	// fe80::1%eth0 would slip through.
	ip = ip.WithZone("").Unmap()
	class := classOf(ip)
	if ip.Is6() {
		for _, v4 := range embeddedIPv4(ip) {
			class = max(class, classOf(v4))
		}
	}
	return class
}

func classOf(ip netip.Addr) addrClass {
	for _, p := range metadataPrefixes {
		if p.Contains(ip) {
			return classMetadata
		}
	}
	for _, p := range privatePrefixes {
		if p.Contains(ip) {
			return classPrivate
		}
	}
	return classPublic
}

var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")   // well-known NAT64 prefix (RFC 6052)
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48") // local-use NAT64 (RFC 8215)
	sixToFour  = netip.MustParsePrefix("2002::/16")      // 6to4 (RFC 3056)
	teredo     = netip.MustParsePrefix("2001::/32")      // Teredo (RFC 4380)
)

// embeddedIPv4 returns the IPv4 addresses that the IPv6 address ip
// carries, in the forms that translators and tunnels act on:
// IPv4-compatible ::a.b.c.d, IPv4-translated ::ffff:0:a.b.c.d, NAT64
// 64:ff9b::a.b.c.d, local-use NAT64 (every place RFC 6052 may put it, as
// the prefix length in use cannot be known), 6to4 2002:AABB:CCDD::,
// Teredo (its server and its obfuscated client) and ISATAP interface ids
// (::0:5efe:a.b.c.d). (IPv4-mapped ::ffff:a.b.c.d is unmapped before.)
func embeddedIPv4(ip netip.Addr) []netip.Addr {
	b := ip.As16()
	v4 := func(i, j, k, l int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[j], b[k], b[l]}) }
	var out []netip.Addr
	switch {
	case [12]byte(b[:12]) == [12]byte{}:
		out = append(out, v4(12, 13, 14, 15)) // IPv4-compatible; :: and ::1 land in 0.0.0.0/8
	case [8]byte(b[:8]) == [8]byte{} && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0:
		out = append(out, v4(12, 13, 14, 15)) // IPv4-translated (SIIT)
	case nat64.Contains(ip):
		out = append(out, v4(12, 13, 14, 15))
	case nat64Local.Contains(ip):
		// RFC 6052's layouts for /48, /56, /64 and /96; bits 64-71 are
		// always skipped.
		out = append(out, v4(6, 7, 9, 10), v4(7, 9, 10, 11), v4(9, 10, 11, 12), v4(12, 13, 14, 15))
	case sixToFour.Contains(ip):
		out = append(out, v4(2, 3, 4, 5))
	case teredo.Contains(ip):
		server := v4(4, 5, 6, 7)
		client := netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
		out = append(out, server, client)
	}
	// ISATAP (RFC 5214) puts the IPv4 address in the interface id of any
	// prefix, after 0000:5efe (or 0200:5efe, universal).
	if (b[8] == 0 || b[8] == 2) && b[9] == 0 && b[10] == 0x5e && b[11] == 0xfe {
		out = append(out, v4(12, 13, 14, 15))
	}
	return out
}

// CheckURL reports whether raw may be stored as a subscriber's URL: an
// absolute http or https URL with a host, a port, if it names one, from 1
// to 65535 (no other can be dialled), no user info (credentials in a URL
// end up in logs), no fragment, at most 2048 bytes. It does not refuse
// literal internal addresses such as http://10.0.0.5/: whether those are
// reachable is decided when connecting, by ClientOptions.AllowPrivate and
// AllowMetadata, which also catches hostnames that resolve to them. Its
// errors never repeat the URL, which may hold a token in its query.
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
	case !validPort(u):
		return fmt.Errorf("webhook URL: port %q: must be a number from 1 to 65535", u.Port())
	case u.User != nil:
		return errors.New("webhook URL: must not contain user info (user:password@); credentials in URLs end up in logs")
	case strings.Contains(raw, "#"):
		return errors.New("webhook URL: must not contain a fragment (#...)")
	}
	return nil
}

// validPort says whether u's port, when it names one, can be dialled.
// url.Parse takes any digits there; a trailing colon with no port means
// the scheme's own.
func validPort(u *url.URL) bool {
	p := u.Port()
	if p == "" {
		return true
	}
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && n > 0
}
