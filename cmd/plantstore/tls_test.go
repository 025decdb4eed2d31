package main

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/plantstore/plantstore/internal/apitest"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	return certWithDates(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

// certWithDates is selfSigned's certificate, valid from notBefore to
// notAfter.
func certWithDates(t *testing.T, notBefore, notAfter time.Time) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "plantstore test"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	certFile, keyFile, roots := selfSigned(t)
	s := serve(t, dir, "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.Contains(s.logs.String(), `"scheme":"https"`) {
		t.Errorf("the listening line does not say https:\n%s", s.logs)
	}
	base := "https://" + strings.TrimPrefix(s.url, "http://")
	client := apitest.Served(t, &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}, base)
	if status, body := create(t, client, base, token, plantBody(1)); status != 200 {
		t.Fatalf("create over HTTPS: %d %s", status, body)
	}
	resp, err := client.Get(base + "/plants/1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("answer over %v", resp.TLS)
	}
	// Served over TLS by itself, the service tells browsers to keep to it.
	if got := resp.Header.Get("Strict-Transport-Security"); got != "max-age=63072000" {
		t.Errorf("Strict-Transport-Security %q over HTTPS", got)
	}
	checkHTTPSLinks(t, client, base, token)

	// TLS 1.1 and older are refused, as are TLS 1.2 suites without forward
	// secrecy or AEAD.
	for name, cfg := range map[string]*tls.Config{
		"TLS 1.1":          {RootCAs: roots, MaxVersion: tls.VersionTLS11},
		"RSA key exchange": {RootCAs: roots, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256}},
		"CBC":              {RootCAs: roots, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}},
	} {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), cfg)
		if err == nil {
			conn.Close()
			t.Errorf("%s: the handshake succeeded", name)
		}
	}
	// ALPN: HTTP/1.1 and HTTP/1.0 are offered (an HTTP/1.0 client that
	// names its protocol is served), h2 alone is refused.
	for proto, want := range map[string]bool{"http/1.1": true, "http/1.0": true, "h2": false} {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{RootCAs: roots, NextProtos: []string{proto}})
		if err == nil {
			if got := conn.ConnectionState().NegotiatedProtocol; got != proto {
				t.Errorf("ALPN %s: negotiated %q", proto, got)
			}
			conn.Close()
		}
		if (err == nil) != want {
			t.Errorf("ALPN %s alone: handshake error %v, want success %v", proto, err, want)
		}
	}
	// Plain HTTP to the HTTPS port gets 400 and the Error body, which
	// says what to do, instead of an empty reply.
	resp, err = http.Get(s.url + "/healthz")
	if err != nil {
		t.Fatalf("plain HTTP to the TLS port: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" ||
		string(b) != `{"error":400,"message":"the client sent an HTTP request to an HTTPS server: use https://"}` {
		t.Errorf("plain HTTP to the TLS port: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	if !s.logged(`"msg":"request rejected before routing","status":400`, 5*time.Second) {
		t.Errorf("the plain HTTP request is not logged:\n%s", s.logs)
	}
	// A longer plain request is refused before it is all read: the
	// answer still ends with FIN, not a reset that some client stacks
	// would lose it to.
	plainRefusalEndsWithFIN(t, s.url)
	// And HTTPS still works after it.
	if status, body := create(t, client, base, token, plantBody(1)); status != 200 {
		t.Fatalf("create over HTTPS after a plain request: %d %s", status, body)
	}

	healthOverTLS(t, dir, base, certFile, keyFile)
	tlsFlagRefusals(t, dir, certFile, keyFile)
}

// A renewed certificate is served from the next handshake without a
// restart, as an ACME client or cert-manager renews it: the files
// replaced, here by a rename over each. A pair that does not load leaves
// the certificate in service, and says so.
func TestTLSCertificateRenewed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t)
	s := serve(t, dir, "--tls-cert", certFile, "--tls-key", keyFile)
	addr := strings.TrimPrefix(s.url, "http://")
	served := func() []byte {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	inFile := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		return block.Bytes
	}
	if !bytes.Equal(served(), inFile(certFile)) {
		t.Fatal("the server does not serve its certificate")
	}
	newCert, newKey, _ := selfSigned(t)
	served() // the server looks at its files again a second after this
	for from, to := range map[string]string{newCert: certFile, newKey: keyFile} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	// health, pinned to the file, asks again once the server has looked.
	env := []string{"PLANTSTORE_ADDR=" + addr, "PLANTSTORE_TLS_CERT=" + certFile}
	if r := cli(t, dir, env, "health"); r.exit != 0 {
		t.Errorf("health just after the renewal: exit %d, %s", r.exit, r.stderr)
	}
	want := inFile(certFile)
	for deadline := time.Now().Add(10 * time.Second); !bytes.Equal(served(), want); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the renewed certificate was not served within 10 s\n%s", s.logs)
		}
	}
	if !s.logged(`"msg":"TLS certificate reloaded"`, 5*time.Second) {
		t.Errorf("the reload is not logged:\n%s", s.logs)
	}
	// A key written half: the renewed certificate stays in service.
	if err := os.WriteFile(keyFile, []byte("-----BEGIN EC PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Only a handshake looks at the files, at most once a second.
	time.Sleep(1100 * time.Millisecond)
	if !bytes.Equal(served(), want) {
		t.Fatal("a key that does not load took the certificate out of service")
	}
	if !s.logged(`"level":"WARN","msg":"the TLS certificate's files changed but do not load: the previous certificate is still served"`, 5*time.Second) {
		t.Errorf("a key that does not load is not logged:\n%s", s.logs)
	}
	for range 3 {
		if !bytes.Equal(served(), want) {
			t.Fatal("a key that does not load took the certificate out of service")
		}
		time.Sleep(600 * time.Millisecond)
	}
}

// A certificate outside its dates, which every client that checks it
// refuses, is said in the log at start and when the one in service
// expires, fails health, and never replaces a valid one: an expired pair
// is not taken, and a pair not valid yet waits until it is. The metric
// shows the expiry of the one in service.
func TestTLSCertificateOutsideDates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	certFile, keyFile, _ := certWithDates(t, now.Add(-2*time.Hour), now.Add(-time.Hour))
	s := serve(t, dir, "--tls-cert", certFile, "--tls-key", keyFile, "--metrics-addr", "127.0.0.1:0")
	addr := strings.TrimPrefix(s.url, "http://")
	metrics := metricsAddr(t, s)
	served := func() *x509.Certificate {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	serving := func(what string, want time.Time) {
		t.Helper()
		if got := served().NotAfter; !got.Equal(want) {
			t.Errorf("%s: the certificate served expires at %v, want the one that expires at %v", what, got, want)
		}
		if got := sample(t, scrapeMetrics(t, metrics), "plantstore_tls_certificate_expiry_timestamp_seconds"); got != float64(want.Unix()) {
			t.Errorf("%s: plantstore_tls_certificate_expiry_timestamp_seconds %v, want %d", what, got, want.Unix())
		}
	}
	// replace puts a new pair at the files' names, as a renewal does,
	// and lets the server look at them (at most once a second).
	replace := func(notBefore, notAfter time.Time) {
		t.Helper()
		c, k, _ := certWithDates(t, notBefore, notAfter)
		for from, to := range map[string]string{c: certFile, k: keyFile} {
			if err := os.Rename(from, to); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(1100 * time.Millisecond)
		served()
	}
	inService := `"level":"WARN","msg":"the TLS certificate in service expired at `
	if !s.logged(inService, 5*time.Second) {
		t.Errorf("serve with an expired certificate does not warn:\n%s", s.logs)
	}
	env := []string{"PLANTSTORE_ADDR=" + addr, "PLANTSTORE_TLS_CERT=" + certFile}
	if r := cli(t, dir, env, "health"); r.exit != 1 || !strings.Contains(r.stderr, "the server's certificate expired at ") {
		t.Errorf("health with an expired certificate served: %+v", r)
	}
	serving("at start", now.Add(-time.Hour))

	// An expired certificate in service gives way to any that loads.
	valid := now.Add(time.Hour)
	replace(now.Add(-time.Hour), valid)
	serving("renewed", valid)
	if r := cli(t, dir, env, "health"); r.exit != 0 {
		t.Errorf("health once renewed: %+v", r)
	}
	// A valid one never to an expired one.
	replace(now.Add(-2*time.Hour), now.Add(-time.Hour))
	if !s.logged(`"level":"WARN","msg":"the TLS certificate's files changed but the new certificate expired at `, 5*time.Second) {
		t.Errorf("an expired pair refused without a word:\n%s", s.logs)
	}
	serving("an expired pair written over a valid one", valid)
	// Nor to one not valid yet, until it is; then that one expires in
	// service, which is said once.
	from := time.Now().Add(3 * time.Second).Truncate(time.Second) // a certificate's dates are in whole seconds
	until := from.Add(2 * time.Second)
	replace(from, until)
	if !s.logged(`is not valid before `+from.UTC().Format(time.RFC3339)+`: the previous certificate is served until then"`, 5*time.Second) {
		t.Errorf("a pair not valid yet, kept waiting without a word:\n%s", s.logs)
	}
	serving("a pair not valid yet", valid)
	time.Sleep(time.Until(from) + 1100*time.Millisecond)
	served()
	serving("once the pair is valid", until)
	if !s.logged(`"msg":"TLS certificate reloaded: it is valid from now"`, 5*time.Second) {
		t.Errorf("the pair put in service once valid, without a word:\n%s", s.logs)
	}
	time.Sleep(time.Until(until) + 1100*time.Millisecond)
	served()
	served()
	if !s.logged(inService+until.UTC().Format(time.RFC3339), 5*time.Second) {
		t.Errorf("a certificate that expired in service, without a word:\n%s", s.logs)
	}
	time.Sleep(1100 * time.Millisecond)
	served()
	if n := strings.Count(s.logs.String(), inService); n != 2 {
		t.Errorf("%d warnings that the certificate in service expired, want 2 (one a certificate):\n%s", n, s.logs)
	}
}

// A certificate served before its NotBefore (there was no other) is
// warned of then, and again when it expires: each reason once.
func TestTLSCertificateNotValidYetThenExpired(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	from := time.Now().Add(2 * time.Second).Truncate(time.Second)
	until := from.Add(2 * time.Second)
	certFile, keyFile, _ := certWithDates(t, from, until)
	s := serve(t, dir, "--tls-cert", certFile, "--tls-key", keyFile)
	addr := strings.TrimPrefix(s.url, "http://")
	handshake := func() {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		conn.Close()
	}
	early := `"level":"WARN","msg":"the TLS certificate in service is not valid before ` + from.UTC().Format(time.RFC3339)
	if !s.logged(early, 5*time.Second) {
		t.Errorf("a certificate not valid yet, served without a word:\n%s", s.logs)
	}
	time.Sleep(time.Until(until) + 1100*time.Millisecond)
	handshake()
	time.Sleep(1100 * time.Millisecond)
	handshake()
	expired := `"level":"WARN","msg":"the TLS certificate in service expired at ` + until.UTC().Format(time.RFC3339)
	if !s.logged(expired, 5*time.Second) {
		t.Errorf("the same certificate expired in service without a word:\n%s", s.logs)
	}
	if a, b := strings.Count(s.logs.String(), early), strings.Count(s.logs.String(), expired); a != 1 || b != 1 {
		t.Errorf("warned %d times that it was not valid yet and %d that it expired, want once each:\n%s", a, b, s.logs)
	}
}

// healthOverTLS: health finds the server where serve's variables say it
// is, over HTTPS, trusting the certificate they name, and no other.
func healthOverTLS(t *testing.T, dir, base, certFile, keyFile string) {
	addr := strings.TrimPrefix(base, "https://")
	env := []string{"PLANTSTORE_ADDR=" + addr, "PLANTSTORE_TLS_CERT=" + certFile, "PLANTSTORE_TLS_KEY=" + keyFile}
	if r := cli(t, dir, env, "health"); r.exit != 0 || r.stdout != base+"/healthz: 200 OK\n" {
		t.Errorf("health with serve's TLS variables: %+v", r)
	}
	if r := cli(t, dir, env, "health", "--path", "/readyz"); r.exit != 0 {
		t.Errorf("health --path /readyz over HTTPS: %+v", r)
	}
	otherCert, _, _ := selfSigned(t)
	if r := cli(t, dir, []string{"PLANTSTORE_ADDR=" + addr, "PLANTSTORE_TLS_CERT=" + otherCert}, "health"); r.exit != 1 || !strings.Contains(r.stderr, "not the one in "+otherCert) {
		t.Errorf("health trusting another certificate: %+v", r)
	}
	if r := cli(t, dir, []string{"PLANTSTORE_ADDR=" + addr}, "health"); r.exit != 1 || !strings.Contains(r.stderr, "400 Bad Request: the server serves HTTPS; give health the certificate serve uses, --tls-cert FILE or PLANTSTORE_TLS_CERT") {
		t.Errorf("health over plain HTTP to the TLS port: %+v", r)
	}
}

// tlsFlagRefusals: serve refuses half a TLS setting and swapped files
// with exit 2, a usage mistake; a file it cannot read (missing, a
// directory; the tests run as root, whom no permission stops) with exit
// 1, as a store's file, and no pointer to --help.
func tlsFlagRefusals(t *testing.T, dir, certFile, keyFile string) {
	for _, tc := range []struct {
		args []string
		exit int
	}{
		{[]string{"--tls-cert", certFile}, 2},
		{[]string{"--tls-key", keyFile}, 2},
		{[]string{"--tls-cert", keyFile, "--tls-key", certFile}, 2},
		{[]string{"--tls-cert", filepath.Join(dir, "missing.pem"), "--tls-key", keyFile}, 1},
		{[]string{"--tls-cert", dir, "--tls-key", keyFile}, 1}, // a directory: read fails
	} {
		r := cli(t, dir, nil, append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
		if r.exit != tc.exit || !strings.Contains(r.stderr, "tls") && !strings.Contains(r.stderr, "TLS") {
			t.Errorf("serve %v: exit %d, %q; want %d and a word on TLS", tc.args, r.exit, r.stderr, tc.exit)
		}
		if hint := strings.Contains(r.stderr, "--help"); hint != (tc.exit == 2) {
			t.Errorf("serve %v: %q; a pointer to --help only for a usage mistake", tc.args, r.stderr)
		}
	}
}

// Behind a proxy under a path prefix, Link headers and the document's
// servers name the public URL.
func TestPublicURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "app")
	s := serve(t, dir, "--public-url", "https://api.example.com/store/")
	client := apitest.Served(t, &http.Client{Timeout: 10 * time.Second}, s.url)
	for i := int64(1); i <= 3; i++ {
		create(t, client, s.url, token, plantBody(i))
	}
	req, _ := http.NewRequest("GET", s.url+"/plants?limit=1", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Strict-Transport-Security"); got != "" {
		t.Errorf("Strict-Transport-Security %q from a service that does not serve TLS itself", got)
	}
	if got, want := resp.Header.Get("Link"), `<https://api.example.com/store/plants?after=1&limit=1>; rel="next"`; got != want {
		t.Errorf("Link %q, want %q", got, want)
	}
	// So do the root page's links.
	var root struct{ Docs string }
	if page := do(client, "GET", s.url+"/", "", ""); json.Unmarshal([]byte(page.body), &root) != nil || root.Docs != "https://api.example.com/store/docs" {
		t.Errorf("GET / for a program: %s", page.body)
	}
	html, _ := http.NewRequest("GET", s.url+"/", nil)
	html.Header.Set("Accept", "text/html")
	if resp, err := client.Do(html); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `<a href="https://api.example.com/store/docs">`) {
			t.Errorf("the root page's links do not keep the prefix:\n%s", b)
		}
	}
	// A redirect to the canonical path stays under the prefix.
	noRedirects := apitest.Served(t, &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, s.url)
	for path, want := range map[string]string{
		"/plants/./1?x=y":   "https://api.example.com/store/plants/1?x=y",
		"/%2e/plants?tag=a": "https://api.example.com/store/plants?tag=a",
		"/docs/":            "https://api.example.com/store/docs",
	} {
		req, _ := http.NewRequest("GET", s.url+path, nil)
		req.URL.Opaque, _, _ = strings.Cut(path, "?") // sent as written, not cleaned
		resp, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Location"); resp.StatusCode/100 != 3 || got != want {
			t.Errorf("GET %s: %d, Location %q, want %q", path, resp.StatusCode, got, want)
		}
	}

	var doc struct {
		Servers []struct{ URL string } `json:"servers" yaml:"servers"`
		Paths   map[string]any         `json:"paths" yaml:"paths"`
	}
	if err := json.Unmarshal([]byte(do(client, "GET", s.url+"/openapi.json", "", "").body), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "https://api.example.com/store" || doc.Paths["/plants"] == nil {
		t.Errorf("openapi.json servers %+v, %d paths", doc.Servers, len(doc.Paths))
	}
	doc.Servers, doc.Paths = nil, nil
	if err := yaml.Unmarshal([]byte(do(client, "GET", s.url+"/openapi.yaml", "", "").body), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "https://api.example.com/store" || doc.Paths["/plants"] == nil {
		t.Errorf("openapi.yaml servers %+v, %d paths", doc.Servers, len(doc.Paths))
	}

	for _, bad := range []string{"api.example.com", "ftp://x/", "https://x/?a=1", "https://u:p@x/"} {
		if r := cli(t, dir, nil, "serve", "--addr", "127.0.0.1:0", "--public-url", bad); r.exit != 2 || !strings.Contains(r.stderr, "--public-url") {
			t.Errorf("--public-url %q: exit %d, %q", bad, r.exit, r.stderr)
		}
	}
}

// checkHTTPSLinks checks that a server serving TLS itself names https URLs
// in the next page's Link and in the served document's servers.
func checkHTTPSLinks(t *testing.T, client *http.Client, base, token string) {
	t.Helper()
	if status, body := create(t, client, base, token, plantBody(2)); status != 200 {
		t.Fatalf("create over HTTPS: %d %s", status, body)
	}
	req, _ := http.NewRequest("GET", base+"/plants?limit=1", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "<" + base + "/plants?after=1&limit=1>; rel=\"next\""; resp.Header.Get("Link") != want {
		t.Errorf("Link over HTTPS %q, want %q", resp.Header.Get("Link"), want)
	}
	resp, err = client.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Servers []struct{ URL string } `json:"servers"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil || len(doc.Servers) != 1 || doc.Servers[0].URL != base {
		t.Errorf("the served document's servers over HTTPS: %+v, %v; want %s", doc.Servers, err, base)
	}
}

// plainRefusalEndsWithFIN sends a plain HTTP request with 4 KiB of
// headers to the TLS port at url, and checks that its 400 is followed by
// the end of the stream.
func plainRefusalEndsWithFIN(t *testing.T, url string) {
	t.Helper()
	conn := limDial(t, url)
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", strings.Repeat("p", 4<<10))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("a long plain request to the TLS port: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a long plain request to the TLS port: %d", resp.StatusCode)
	}
	wantFIN(t, conn, br, "the 400 to a long plain request")
}
