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
		"10.1.2.3",
		"169.254.169.254", // cloud metadata
		"[::ffff:127.0.0.1]",
		"[fd00:ec2::254]",
		"0.0.0.0",
	} {
		t.Run(host, func(t *testing.T) {
			r := Send(t.Context(), c, Message{ID: "msg_ssrf", URL: "http://" + host + ":" + port + "/", Key: testKey, Body: []byte(`{}`)}, time.Now())
			if r.Outcome != Retry || r.Status != 0 || !errors.Is(r.Err, ErrForbiddenAddress) {
				t.Fatalf("Send = %+v, want Retry with ErrForbiddenAddress", r)
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

func TestForbidden(t *testing.T) {
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

		{"8.8.8.8", false},
		{"1.1.1.1", false},
		{"172.32.0.1", false},
		{"100.128.0.1", false},
		{"169.253.255.255", false},
		{"2606:4700:4700::1111", false},
		{"::ffff:8.8.8.8", false},
		{"::8.8.8.8", false},
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

func TestRefuseForbiddenNamesTheAddress(t *testing.T) {
	err := refuseForbidden("tcp4", "169.254.169.254:80", nil)
	if !errors.Is(err, ErrForbiddenAddress) || !strings.Contains(err.Error(), "169.254.169.254") {
		t.Errorf("error %v: want ErrForbiddenAddress naming the address", err)
	}
	if err := refuseForbidden("tcp4", "not an address", nil); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("an unparsable address: %v, want ErrForbiddenAddress", err)
	}
	if err := refuseForbidden("tcp6", "[2606:4700:4700::1111]:443", nil); err != nil {
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
