package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/plantstore/plantstore/internal/httpapi"
)

// runHealth asks a running server whether it is up. It exists for
// container health checks: the image has no shell and no curl, so the
// binary probes itself. It reads --addr (PLANTSTORE_ADDR) and --tls-cert
// (PLANTSTORE_TLS_CERT) as serve does, so in the image it finds the
// server, over HTTPS when it serves HTTPS, without being told where.
func runHealth(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("health", `health [--addr HOST:PORT] [--tls-cert FILE] [--path /healthz] [--timeout 2s]

Sends GET PATH to the server listening on --addr, the same flag and
variable as serve's (a wildcard address such as 0.0.0.0 is asked on
loopback), and exits 0 if it answers 200, 1 otherwise. With --tls-cert,
serve's flag and variable too, it asks over HTTPS and trusts exactly that
certificate, whatever name it carries, while it is within its dates. --path /readyz asks whether the
server can reach its store. Redirects and proxies are not followed.`, getenv, stdout, stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "`HOST:PORT` the server listens on")
	certFile := fs.String("tls-cert", "", "`FILE` with the server's TLS certificate (PEM), as given to serve: ask over HTTPS and trust it")
	path := fs.FlagSet.String("path", "/healthz", "`PATH` to ask: /healthz (the process is up) or /readyz (it can reach its store)")
	timeout := fs.Duration("timeout", 2*time.Second, "time the server has to answer") // command line only (commandLineOnly)
	if rest, err := fs.parse(args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError(fmt.Sprintf("health takes no arguments, got %q", rest))
	}
	scheme := "http"
	transport := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	if *certFile != "" {
		pinned, err := pinCertificate(*certFile)
		if err != nil {
			return usageError(err.Error())
		}
		scheme, transport.TLSClientConfig = "https", pinned
	}
	target, err := probeURL(scheme, *addr, *path)
	if err != nil {
		return usageError(err.Error())
	}
	if *timeout <= 0 {
		return usageError("--timeout must be positive")
	}

	client := &http.Client{
		Timeout:   *timeout,
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp, err := client.Do(req)
	if errors.Is(err, errNotPinned) {
		// Just after a renewal the server may serve the previous
		// certificate for up to a second (it looks at its files at most
		// that often): once more, after that.
		select {
		case <-ctx.Done():
		case <-time.After(certRecheck):
			resp, err = client.Do(req.Clone(ctx))
		}
	}
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Plain HTTP to a port serving HTTPS is answered 400 with the
		// reason (listener.go): the probe was not told of the TLS.
		if scheme == "http" && resp.StatusCode == http.StatusBadRequest && bytes.Contains(body, []byte("HTTP request to an HTTPS server")) {
			return fmt.Errorf("health: %s answered %s: the server serves HTTPS; give health the certificate serve uses, --tls-cert FILE or PLANTSTORE_TLS_CERT", target, resp.Status)
		}
		// The Error body says why (/readyz: what the store answered).
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &e) == nil && e.Message != "" {
			return fmt.Errorf("health: %s answered %s: %s", target, serverMessage(resp.Status), serverMessage(e.Message))
		}
		return fmt.Errorf("health: %s answered %s", target, serverMessage(resp.Status))
	}
	fmt.Fprintf(stdout, "%s: %s\n", target, serverMessage(resp.Status))
	return nil
}

// errNotPinned is the handshake's error when the server presents another
// certificate than the pinned one.
var errNotPinned = errors.New("the server's certificate is not the one in")

// certRecheck is longer than the server's pause between two looks at its
// certificate's files (httpapi's certCheckEvery).
const certRecheck = 1100 * time.Millisecond

// pinCertificate is a TLS client configuration that trusts the server
// only if it presents the first certificate of certFile (the server's
// own, as serve reads it). The probe reaches the server on loopback, a
// name its certificate seldom carries, so the certificate itself is
// checked instead of a name and a chain.
func pinCertificate(certFile string) (*tls.Config, error) {
	b, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert: %v", err)
	}
	var want []byte
	for rest := b; want == nil; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return nil, fmt.Errorf("--tls-cert %s: no PEM certificate in it", certFile)
		}
		if block.Type == "CERTIFICATE" {
			want = block.Bytes
		}
	}
	return &tls.Config{
		// Replaced by the comparison below, which is stricter: this one
		// certificate, not any that a CA vouches for.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, want) {
				return fmt.Errorf("%w %s", errNotPinned, certFile)
			}
			// The one check of a chain's that pinning does not make:
			// every other client refuses a certificate outside its
			// dates, so the server is not healthy with one.
			cert, now := cs.PeerCertificates[0], time.Now()
			why := httpapi.CertificateOutsideDates(cert, now)
			switch {
			case why == "":
				return nil
			case now.After(cert.NotAfter):
				return fmt.Errorf("the server's certificate %s; clients that check it refuse it: renew %s", why, certFile)
			}
			return fmt.Errorf("the server's certificate %s; clients that check it refuse it", why)
		},
		MinVersion: tls.VersionTLS12,
	}, nil
}

// probeURL is the URL of path on the server listening on addr: a
// wildcard or empty host is reached on loopback.
func probeURL(scheme, addr, path string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--addr %q: %v", addr, err)
	}
	if port == "" || port == "0" {
		return "", fmt.Errorf("--addr %q: needs the port the server listens on", addr)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	if !strings.HasPrefix(path, "/") {
		return "", errors.New("--path must start with /")
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port), Path: path}
	return u.String(), nil
}
