package httpapi

import (
	"crypto/tls"
	"crypto/x509"
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
//
// Every client that checks a certificate refuses one outside its dates,
// the commonest TLS outage, so the dates are watched too: a pair already
// expired never replaces one still valid; a pair not valid yet waits
// until it is; and the certificate in service is logged at WARN when it
// expires, once (at start, if it already has).
type certFiles struct {
	certFile, keyFile string
	log               *slog.Logger

	cert atomic.Pointer[tls.Certificate]
	next atomic.Int64 // UnixNano of the next look at the files

	mu     sync.Mutex       // held while looking
	stamp  string           // the files as last looked at (stat)
	early  *tls.Certificate // a changed pair not valid yet, served from its NotBefore
	warned *tls.Certificate // the certificate in service whose dates were logged...
	why    string           // ...and what was said of them (not valid yet, then expired)
}

// loadCertFiles reads the pair a first time: an error here is the
// operator's to fix before the server starts. A certificate outside its
// dates is served all the same (a pinned client may accept it, and the
// server is what renews nothing), with a warning.
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
	now := time.Now()
	c.next.Store(now.Add(certCheckEvery).UnixNano())
	c.warnOutsideDates(now)
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
		c.reloadIfChanged(now)
		if c.early != nil && !now.Before(c.early.Leaf.NotBefore) {
			c.serve(c.early, "TLS certificate reloaded: it is valid from now")
		}
		c.warnOutsideDates(now)
		c.mu.Unlock()
	}
	return c.cert.Load(), nil
}

// reloadIfChanged loads the pair again when the files changed since the
// last look. c.mu is held.
func (c *certFiles) reloadIfChanged(now time.Time) {
	stamp := c.look()
	if stamp == c.stamp {
		return
	}
	c.stamp = stamp
	c.early = nil
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		c.log.Warn("the TLS certificate's files changed but do not load: the previous certificate is still served",
			"cert", c.certFile, "key", c.keyFile, "error", err.Error())
		return
	}
	inService := outsideDates(c.cert.Load(), now) == ""
	switch why := outsideDates(&cert, now); {
	case why == "" || !inService:
		c.serve(&cert, "TLS certificate reloaded")
	case cert.Leaf.NotAfter.Before(now):
		c.log.Warn("the TLS certificate's files changed but the new certificate "+why+": the previous certificate is still served",
			c.dates(&cert)...)
	default:
		c.early = &cert
		c.log.Warn("the TLS certificate's files changed but the new certificate "+why+": the previous certificate is served until then",
			c.dates(&cert)...)
	}
}

// serve puts cert in service. c.mu is held.
func (c *certFiles) serve(cert *tls.Certificate, msg string) {
	c.cert.Store(cert)
	c.early = nil
	c.log.Info(msg, c.dates(cert)...)
}

// warnOutsideDates logs that the one in service is outside its dates,
// once for each certificate and reason (one served before its NotBefore
// may expire in service too). c.mu is held, or c not shared yet.
func (c *certFiles) warnOutsideDates(now time.Time) {
	cert := c.cert.Load()
	why := outsideDates(cert, now)
	if why == "" || c.warned == cert && c.why == why {
		return
	}
	c.warned, c.why = cert, why
	c.log.Warn("the TLS certificate in service "+why+": every client that checks it refuses the connection; renew it (its files are read again when they change)",
		c.dates(cert)...)
}

// dates are the log attributes that name cert.
func (c *certFiles) dates(cert *tls.Certificate) []any {
	attrs := []any{"cert", c.certFile}
	if leaf := cert.Leaf; leaf != nil {
		attrs = append(attrs, "subject", leaf.Subject.String(),
			"not_before", leaf.NotBefore.UTC().Format(time.RFC3339), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return attrs
}

// outsideDates says how cert is outside its dates at now, or "" when it
// is within them (or its leaf was not parsed).
func outsideDates(cert *tls.Certificate, now time.Time) string {
	if cert == nil || cert.Leaf == nil {
		return ""
	}
	return CertificateOutsideDates(cert.Leaf, now)
}

// CertificateOutsideDates says how leaf is outside its dates at now
// ("expired at …", "is not valid before …"), or "" when it is within
// them: what every client that checks a certificate refuses, and so what
// serve warns of and health fails on.
func CertificateOutsideDates(leaf *x509.Certificate, now time.Time) string {
	switch {
	case now.After(leaf.NotAfter):
		return "expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)
	case now.Before(leaf.NotBefore):
		return "is not valid before " + leaf.NotBefore.UTC().Format(time.RFC3339)
	}
	return ""
}
