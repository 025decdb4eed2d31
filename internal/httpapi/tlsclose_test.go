package httpapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"math/big"
	"net"
	"testing"
	"time"
)

// A TLS connection whose client stopped reading closes within
// closeNotifyWait, not the 5 s tls.Conn gives its close_notify alert: the
// servers close connections one after another (net/http's Server.Close),
// and each such client held the rest back that long.
func TestTLSCloseToAClientNotReading(t *testing.T) {
	server, client := net.Pipe() // no buffer: a write waits for its reader
	defer client.Close()
	sc := &sniffedConn{Conn: server, cfg: selfSignedConfig(t), rejecter: rejecter{log: slog.New(slog.DiscardHandler)}}
	read := make(chan error, 1)
	go func() {
		_, err := sc.Read(make([]byte, 1))
		read <- err
	}()
	tc := tls.Client(client, &tls.Config{InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Write([]byte("G")); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	// The client reads no more: the alert cannot be written.
	began := time.Now()
	sc.Close()
	if took := time.Since(began); took > closeNotifyWait+time.Second {
		t.Errorf("Close took %v with the client not reading; want about %v", took, closeNotifyWait)
	}
}

// selfSignedConfig is a server's TLS configuration with a fresh
// self-signed certificate and no session tickets (which TLS 1.3 sends
// after the handshake, and a client that reads nothing more would never
// take).
func selfSignedConfig(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, SessionTicketsDisabled: true}
}
