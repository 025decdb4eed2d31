package webhook

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Only loopback forms are dialled here: the guard refuses them before
// connect, and if it did not, the test's own server would see the request.
// The other internal addresses are checked at unit level (TestClassify,
// TestGuard), so that a broken guard never sends test traffic off the
// machine.
func TestClientRefusesInternalAddresses(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	c := NewClient(ClientOptions{Timeout: 2 * time.Second})
	t.Cleanup(c.CloseIdleConnections)
	for _, host := range []string{
		"127.0.0.1",
		"[::1]",
		"localhost", // a name that resolves to loopback: checked after DNS
		"[::ffff:127.0.0.1]",
		"0.0.0.0", // Linux connects it to the local host
	} {
		t.Run(host, func(t *testing.T) {
			r := Send(t.Context(), c, Message{ID: "msg_ssrf", URL: "http://" + host + ":" + port + "/", Key: testKey, Body: []byte(`{}`)}, time.Now())
			if r.Outcome != Retry || r.Status != 0 || !errors.Is(r.Err, ErrForbiddenAddress) {
				t.Fatalf("Send = %+v, want Retry with ErrForbiddenAddress", r)
			}
			// What the operator reads in webhook list names the way out.
			if !strings.Contains(r.Err.Error(), "serve --allow-private-webhooks allows it") {
				t.Errorf("the refusal %q does not name --allow-private-webhooks", r.Err)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the server saw %d requests, want 0", n)
	}
}

func TestClientAllowPrivateDelivers(t *testing.T) {
	srv, got := newSubscriber(t, status(http.StatusNoContent))
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	c := NewClient(ClientOptions{AllowPrivate: true, Timeout: 2 * time.Second})
	t.Cleanup(c.CloseIdleConnections)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		r := Send(t.Context(), c, Message{ID: "msg_ok", URL: "http://" + host + ":" + port + "/", Key: testKey, Body: []byte(`{}`)}, time.Now())
		if r.Outcome != Delivered {
			t.Fatalf("%s: Send = %+v, want Delivered", host, r)
		}
		if req := <-got; req.err != nil {
			t.Errorf("%s: subscriber: %v", host, req.err)
		}
	}
}

func TestClientSettings(t *testing.T) {
	c := NewClient(ClientOptions{})
	if c.Timeout != 10*time.Second {
		t.Errorf("default Timeout = %s, want 10s", c.Timeout)
	}
	tr, ok := c.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("Transport is %T, want *http.Transport", c.Transport)
	}
	// A proxy from the environment would open the connection for us, past
	// the address check; ProxyFromEnvironment never proxies loopback, so
	// this cannot be shown with a test server and is checked here instead.
	if tr.Proxy != nil {
		t.Error("Transport.Proxy is set; the address check would be bypassed")
	}
	if tr.TLSClientConfig == nil || tr.TLSClientConfig.MinVersion < tls.VersionTLS12 {
		t.Error("TLS below 1.2 is allowed")
	}
	if tr.ResponseHeaderTimeout <= 0 || tr.ResponseHeaderTimeout > c.Timeout {
		t.Errorf("ResponseHeaderTimeout = %s, want within the attempt's %s", tr.ResponseHeaderTimeout, c.Timeout)
	}
	if c.CheckRedirect == nil || c.CheckRedirect(nil, nil) != http.ErrUseLastResponse {
		t.Error("redirects would be followed")
	}
	if got := NewClient(ClientOptions{Timeout: 3 * time.Second}).Timeout; got != 3*time.Second {
		t.Errorf("Timeout = %s, want 3s", got)
	}
}

func TestClassify(t *testing.T) {
	forbidden := func(ip netip.Addr) bool { return classify(ip) != classPublic }
	for _, tc := range []struct {
		addr      string
		forbidden bool
	}{
		{"127.0.0.1", true},
		{"127.255.0.9", true},
		{"::1", true},
		{"::", true},
		{"0.0.0.0", true},
		{"0.1.2.3", true},
		{"10.0.0.1", true},
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"192.168.1.1", true},
		{"100.64.0.1", true},
		{"100.127.255.255", true},
		{"169.254.169.254", true},
		{"169.254.0.1", true},
		{"224.0.0.1", true},
		{"239.255.255.250", true},
		{"255.255.255.255", true},
		{"240.0.0.1", true},
		{"198.18.0.1", true},
		{"192.0.0.8", true},
		{"192.0.2.1", true},
		{"198.51.100.7", true},
		{"203.0.113.9", true},
		{"fc00::1", true},
		{"fd12:3456::1", true},
		{"fd00:ec2::254", true},
		{"fe80::1", true},
		{"fe80::1%eth0", true},
		{"fec0::1", true},
		{"ff02::1", true},
		{"::ffff:127.0.0.1", true},
		{"::ffff:10.0.0.1", true},
		{"::ffff:169.254.169.254", true},
		{"::127.0.0.1", true}, // IPv4-compatible
		{"::10.0.0.1", true},
		{"::169.254.169.254", true},

		// The IPv6 forms that carry an IPv4 address, each judged by it.
		{"::ffff:0:127.0.0.1", true}, // IPv4-translated (SIIT)
		{"::ffff:0:10.1.2.3", true},
		{"64:ff9b::127.0.0.1", true}, // NAT64, well-known prefix
		{"64:ff9b::a9fe:a9fe", true}, // 169.254.169.254
		{"64:ff9b::10.0.0.1", true},
		{"64:ff9b:1::1", true},                 // local-use NAT64: refused as a whole
		{"64:ff9b:1:7f00:1::", true},           // ... 127.0.0.1 at /48
		{"2002:7f00:1::", true},                // 6to4 of 127.0.0.1
		{"2002:a9fe:a9fe::1", true},            // 6to4 of 169.254.169.254
		{"2002:c0a8:101::", true},              // 6to4 of 192.168.1.1
		{"2001:0:7f00:1::", true},              // Teredo with server 127.0.0.1
		{"2001:0:808:808:0:0:80ff:fffe", true}, // Teredo client 127.0.0.1 (obfuscated), public server
		{"2001:0:808:808:0:0:5601:5601", true}, // Teredo client 169.254.169.254
		{"2001:db8:1::5efe:7f00:1", true},      // ISATAP of 127.0.0.1 (and documentation)
		{"2606:4700::5efe:a9fe:a9fe", true},    // ISATAP of 169.254.169.254 under a public prefix
		{"2606:4700::200:5efe:a00:1", true},    // ISATAP, universal form, of 10.0.0.1
		{"100::1", true},                       // discard-only
		{"2001:db8::1", true},                  // documentation
		{"3fff::1", true},                      // documentation
		{"2001:2::1", true},                    // benchmarking

		{"8.8.8.8", false},
		{"1.1.1.1", false},
		{"172.32.0.1", false},
		{"100.128.0.1", false},
		{"169.253.255.255", false},
		{"2606:4700:4700::1111", false},
		{"::ffff:8.8.8.8", false},
		{"::8.8.8.8", false},
		{"::ffff:0:8.8.8.8", false},
		{"64:ff9b::8.8.8.8", false},
		{"2002:808:808::1", false},
		{"2001:0:808:808:0:0:f7f7:f7f7", false}, // Teredo, public server and client 8.8.8.8
		{"2606:4700::5efe:808:808", false},      // ISATAP of a public address
		{"101::1", false},
	} {
		ip := netip.MustParseAddr(tc.addr)
		if got := forbidden(ip); got != tc.forbidden {
			t.Errorf("forbidden(%s) = %t, want %t", tc.addr, got, tc.forbidden)
		}
	}
	if !forbidden(netip.Addr{}) {
		t.Error("the zero Addr is allowed")
	}
}

// --allow-private-webhooks opens loopback and private networks, not the
// cloud metadata endpoints, in any of their IPv6 disguises; those need
// AllowMetadata. Checked on the very dialer NewClient uses, without
// connecting anywhere.
func TestGuard(t *testing.T) {
	metadata := []string{
		"169.254.169.254:80",
		"169.254.170.2:80",
		"[fd00:ec2::254]:80",
		"[fd00:ec2::23]:80",
		"100.100.100.200:80",
		"168.63.129.16:80",
		"192.0.0.192:80",
		"[::ffff:169.254.169.254]:80",
		"[::169.254.169.254]:80",
		"[::ffff:0:169.254.169.254]:80",
		"[64:ff9b::169.254.169.254]:80",
		"[64:ff9b:1:a9fe:a9:fe00::]:80", // local-use NAT64 /48 layout
		"[64:ff9b:1::a9fe:a9fe]:80",     // local-use NAT64 /96 layout
		"[2002:a9fe:a9fe::]:80",
		"[2001:0:808:808::5601:5601]:80",
		"[2606:4700::5efe:a9fe:a9fe]:80",
	}
	private := []string{"127.0.0.1:80", "[::1]:80", "10.1.2.3:443", "[fd12::1]:80", "[64:ff9b::7f00:1]:80", "[2002:a00:1::]:80", "[fe80::1%eth0]:80"}
	public := []string{"8.8.8.8:443", "[2606:4700:4700::1111]:443", "[64:ff9b::808:808]:443"}

	for _, tc := range []struct {
		opts                      ClientOptions
		metadata, private, public bool // allowed?
	}{
		{ClientOptions{}, false, false, true},
		{ClientOptions{AllowPrivate: true}, false, true, true},
		{ClientOptions{AllowMetadata: true}, true, false, true},
		{ClientOptions{AllowPrivate: true, AllowMetadata: true}, true, true, true},
	} {
		d := newDialer(tc.opts, time.Second)
		check := func(addrs []string, allowed bool) {
			for _, a := range addrs {
				var err error
				if d.Control != nil {
					err = d.Control("tcp", a, nil)
				}
				if allowed && err != nil {
					t.Errorf("%+v: %s refused: %v", tc.opts, a, err)
				}
				if !allowed && !errors.Is(err, ErrForbiddenAddress) {
					t.Errorf("%+v: %s allowed (%v), want ErrForbiddenAddress", tc.opts, a, err)
				}
			}
		}
		check(metadata, tc.metadata)
		check(private, tc.private)
		check(public, tc.public)
	}
	err := newDialer(ClientOptions{AllowPrivate: true}, time.Second).Control("tcp4", "169.254.169.254:80", nil)
	if err == nil || !strings.Contains(err.Error(), "metadata") || !strings.Contains(err.Error(), "--allow-metadata-webhooks") {
		t.Errorf("refusing the metadata address: %v, want an error that says why, naming --allow-metadata-webhooks", err)
	}
}

func TestGuardNamesTheAddress(t *testing.T) {
	err := (guard{}).control("tcp4", "169.254.169.254:80", nil)
	if !errors.Is(err, ErrForbiddenAddress) || !strings.Contains(err.Error(), "169.254.169.254") {
		t.Errorf("error %v: want ErrForbiddenAddress naming the address", err)
	}
	if err := (guard{}).control("tcp4", "not an address", nil); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("an unparsable address: %v, want ErrForbiddenAddress", err)
	}
	if err := (guard{}).control("tcp6", "[2606:4700:4700::1111]:443", nil); err != nil {
		t.Errorf("a public address: %v", err)
	}
}

func TestCheckURL(t *testing.T) {
	for _, raw := range []string{
		"https://example.com/hooks",
		"http://example.com",
		"https://example.com:8443/a/b?token=x&y=1",
		"HTTPS://Example.COM/",
		"https://[2001:db8::1]/hook",
		"http://10.0.0.5/hook", // decided at connect time, not here
		"http://127.0.0.1:9000/",
		"https://example.com:65535/",
		"https://example.com:1/",
		"https://example.com:/", // the scheme's port
		"https://example.com/" + strings.Repeat("a", 2048-len("https://example.com/")),
	} {
		if err := CheckURL(raw); err != nil {
			t.Errorf("CheckURL(%.60q) = %v, want nil", raw, err)
		}
	}
	for _, tc := range []struct{ raw, wantInErr string }{
		{"", "http"},
		{"example.com/hooks", "http"},
		{"/hooks", "http"},
		{"ftp://example.com/", "http"},
		{"javascript:alert(1)", "http"},
		{"file:///etc/passwd", "http"},
		{"http:example.com", "host"},
		{"https://", "host"},
		{"https:///path", "host"},
		{"https://:443/", "host"},
		{"https://user:hunter2@example.com/", "user info"},
		{"https://user@example.com/", "user info"},
		{"https://example.com/#frag", "fragment"},
		{"https://example.com/#", "fragment"},
		{"https://exa mple.com/", ""},
		{"https://example.com/\n", ""},
		{"https://example.com:port/", ""},
		{"http://93.184.215.14:99999/x", "from 1 to 65535"},
		{"https://example.com:65536/", "from 1 to 65535"},
		{"http://example.com:0/", "from 1 to 65535"},
		{"http://[2001:db8::1]:70000/", "from 1 to 65535"},
		{"https://example.com/" + strings.Repeat("a", 2048), "2048"},
	} {
		err := CheckURL(tc.raw)
		if err == nil {
			t.Errorf("CheckURL(%.60q) = nil, want an error", tc.raw)
			continue
		}
		if !strings.Contains(err.Error(), tc.wantInErr) {
			t.Errorf("CheckURL(%.60q) = %v, want it to mention %q", tc.raw, err, tc.wantInErr)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("CheckURL's error repeats the password: %v", err)
		}
	}
}
