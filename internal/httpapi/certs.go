package httpapi

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// certCheckEvery is how often, at most, a handshake looks whether the
// certificate's files changed.
var certCheckEvery = time.Second

// certFiles serves the certificate and key of two PEM files, read again
// when either changes: a renewed certificate (ACME clients, cert-manager,
// which replace the files or swap a symbolic link to them) is served from
// the next handshake, without a restart. A handshake looks at the files
// (two stats) at most once every certCheckEvery; the others take the
// certificate in service without a lock. A changed pair that does not
// load (written half, or a key of another certificate) leaves the one in
// service and is logged, once for each change of the files.
type certFiles struct {
	certFile, keyFile string
	log               *slog.Logger

	cert atomic.Pointer[tls.Certificate]
	next atomic.Int64 // UnixNano of the next look at the files

	mu    sync.Mutex // held while looking
	stamp string     // the files as last looked at (stat)
}

// loadCertFiles reads the pair a first time: an error here is the
// operator's to fix before the server starts.
func loadCertFiles(certFile, keyFile string, log *slog.Logger) (*certFiles, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &certFiles{certFile: certFile, keyFile: keyFile, log: log}
	c.stamp = c.look()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	c.cert.Store(&cert)
	c.next.Store(time.Now().Add(certCheckEvery).UnixNano())
	return c, nil
}

// look is what the files are now: the size and time of change of each
// (of its target, for a symbolic link), or the error that stat gave.
func (c *certFiles) look() string {
	stamp := ""
	for _, name := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			stamp += err.Error() + ";"
			continue
		}
		stamp += fmt.Sprintf("%d %d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp
}

// GetCertificate is a tls.Config's.
func (c *certFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := time.Now()
	if now.UnixNano() >= c.next.Load() && c.mu.TryLock() {
		c.next.Store(now.Add(certCheckEvery).UnixNano())
		c.reloadIfChanged()
		c.mu.Unlock()
	}
	return c.cert.Load(), nil
}

// reloadIfChanged loads the pair again when the files changed since the
// last look. c.mu is held.
func (c *certFiles) reloadIfChanged() {
	stamp := c.look()
	if stamp == c.stamp {
		return
	}
	c.stamp = stamp
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		c.log.Warn("the TLS certificate's files changed but do not load: the previous certificate is still served",
			"cert", c.certFile, "key", c.keyFile, "error", err.Error())
		return
	}
	c.cert.Store(&cert)
	attrs := []any{"cert", c.certFile}
	if leaf := cert.Leaf; leaf != nil {
		attrs = append(attrs, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	c.log.Info("TLS certificate reloaded", attrs...)
}
