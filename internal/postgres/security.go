package postgres

import (
	"fmt"
	"net/netip"
	neturl "net/url"
	"os"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// defaultRequireAuth is the require_auth a connection with a password gets
// when neither the URL nor PGREQUIREAUTH sets one. Without it pgx answers a
// server that asks for the password in clear (or as an MD5 digest) with
// the password, and the server asking may be a man in the middle: sslmode
// below verify-full does not tell the real server from another. SCRAM
// never sends the password, and proves that the server knows it (a
// verifier of it) before the session starts.
const defaultRequireAuth = "scram-sha-256"

// setRequireAuth applies defaultRequireAuth to cfg, parsed from raw. A
// connection without a password is left alone: it has none to give away,
// and it may rely on trust, peer or certificate authentication, which
// scram-sha-256 would refuse (it requires an authentication exchange).
func setRequireAuth(cfg *pgxpool.Config, raw string) {
	cc := cfg.ConnConfig
	if cc.Password == "" || cc.RequireAuth != "" {
		return
	}
	if u, err := neturl.Parse(raw); err == nil && u.Query().Has("require_auth") {
		return // require_auth= (empty) in the URL: the operator's choice
	}
	cc.RequireAuth = defaultRequireAuth
}

// Warnings returns what, in the connection settings of url, leaves the
// database connection open to a network attacker, one sentence each, for
// serve to log at start (at warn level). Open connects all the same; these
// are deployment choices this process cannot judge alone. It looks at the
// settings as Open would use them (the URL, then the PG* variables and
// the service and password files pgx reads), and says nothing about a URL
// that Open would refuse.
//
//   - A host that is not loopback or a Unix socket, reached with an sslmode
//     weaker than verify-full: plain text may be used (disable, allow,
//     prefer), or TLS without checking which server answers (require,
//     verify-ca), so anyone on the path can read and change what is stored
//     and pose as the server.
//   - A require_auth that lets the server ask for the password in clear
//     (password) or as an MD5 digest (md5) while a password is configured.
func Warnings(url string) []string {
	cfg, _, err := poolConfig(url, Options{})
	if err != nil {
		return nil
	}
	cc := cfg.ConnConfig
	var out []string
	mode := sslmode(url)
	targets := append([]*pgconn.FallbackConfig{{Host: cc.Host, Port: cc.Port, TLSConfig: cc.TLSConfig}}, cc.Fallbacks...)
	var weak []string
	for _, t := range targets {
		verified := t.TLSConfig != nil && !t.TLSConfig.InsecureSkipVerify
		if !verified && !localHost(t.Host) && !slices.Contains(weak, t.Host) {
			weak = append(weak, t.Host)
		}
	}
	if len(weak) > 0 {
		out = append(out, fmt.Sprintf("the database connection to %s is not verified (sslmode=%s): anyone on the network path can read and change what is stored and pose as the server; use sslmode=verify-full with sslrootcert naming the server's CA",
			strings.Join(weak, ", "), mode))
	}
	if cc.Password != "" {
		if methods := clearPasswordMethods(cc.RequireAuth); len(methods) > 0 {
			out = append(out, fmt.Sprintf("require_auth=%s lets the database server, or anyone posing as it, ask for the password %s; use require_auth=scram-sha-256",
				cc.RequireAuth, strings.Join(methods, " or ")))
		}
	}
	return out
}

// sslmode names the sslmode the URL asks for, as pgx reads it: the URL's,
// else PGSSLMODE, else prefer. PGSSLMODE comes from the process's
// environment, not a getenv of the caller's: that is where pgx reads it,
// and the warnings must judge what pgx will do (docs/configuration.md). (ssl=true is require; sslrootcert=system
// makes any mode verify-full, which Warnings sees in the TLS settings.)
func sslmode(raw string) string {
	if u, err := neturl.Parse(raw); err == nil {
		q := u.Query()
		if m := q.Get("sslmode"); m != "" {
			return m
		}
		if q.Get("ssl") == "true" {
			return "require"
		}
	}
	if m := os.Getenv("PGSSLMODE"); m != "" {
		return m
	}
	return "prefer"
}

// localHost reports whether host is on this machine: a Unix socket's
// directory, localhost or a loopback address, where there is no network
// path to attack.
func localHost(host string) bool {
	if strings.HasPrefix(host, "/") || strings.EqualFold(host, "localhost") {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.Unmap().IsLoopback()
}

// clearPasswordMethods lists the methods a require_auth value allows that
// show the server the password (password) or a digest of it that can be
// cracked offline (md5). An empty value allows every method.
func clearPasswordMethods(requireAuth string) []string {
	var listed []string
	negated := false
	for m := range strings.SplitSeq(requireAuth, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(m, "!"); ok {
			negated, m = true, rest
		}
		listed = append(listed, m)
	}
	var allowed []string
	for _, m := range []string{"password", "md5"} {
		if len(listed) == 0 || slices.Contains(listed, m) != negated {
			allowed = append(allowed, m)
		}
	}
	var out []string
	for _, m := range allowed {
		if m == "password" {
			out = append(out, "in clear (password)")
		} else {
			out = append(out, "as an MD5 digest (md5)")
		}
	}
	return out
}
