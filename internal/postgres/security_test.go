package postgres

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/plantstore/plantstore/internal/postgres/pgtest"
)

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"postgres://u:hunter2@db.example.com/plants", "postgres://u:xxxxx@db.example.com/plants"},
		{"postgres://u@db/plants?password=hunter2&sslmode=verify-full", "postgres://u@db/plants?password=xxxxx&sslmode=verify-full"},
		{"postgres://u@db/plants?sslmode=verify-full&sslkey=/k.pem&sslpassword=hunter2", "postgres://u@db/plants?sslkey=%2Fk.pem&sslmode=verify-full&sslpassword=xxxxx"},
		{"postgres://u@db/plants?oauth_client_secret=hunter2&SSLPassword=hunter2", "postgres://u@db/plants?SSLPassword=xxxxx&oauth_client_secret=xxxxx"},
		{"postgres://u@db/plants?sslmode=require&application_name=x", "postgres://u@db/plants?sslmode=require&application_name=x"},
		{"postgres://u@db/plants?%zz", "(a database URL that does not parse)"},
		{"postgres://u@db/plants?sslpassword=hunter2%zz", "(a database URL that does not parse)"},
	} {
		if got := RedactURL(tc.raw); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
	// Every secret of the URL is also taken out of error texts.
	secrets, ok := urlPasswords("postgres://u:pw1@db/plants?sslpassword=pw2&password=pw3&oauth_client_secret=pw4&sslmode=pw5")
	if !ok || strings.Join(secrets, ",") == "" {
		t.Fatalf("urlPasswords = %q, %t", secrets, ok)
	}
	if got := withoutSecrets("pw1 pw2 pw3 pw4 pw5", secrets); got != "xxxxx xxxxx xxxxx xxxxx pw5" {
		t.Errorf("redact = %q", got)
	}
	// A short password is taken out only where it stands apart: replaced
	// wherever it occurs, it would garble every message.
	for _, tc := range []struct{ secret, text, want string }{
		{"p", `postgres: connect: failed to connect to user=u: password=p expected`, `postgres: connect: failed to connect to user=u: password=xxxxx expected`},
		{"p", `postgres://u:p@db/x`, `postgres://u:xxxxx@db/x`},
		{"p@ss", `postgres://u:p%40ss@db/x, p@ss`, `postgres://u:xxxxx@db/x, xxxxx`},
		{"hunter22", `xhunter22x`, `xxxxxxx`},
	} {
		if got := withoutSecrets(tc.text, []string{tc.secret}); got != tc.want {
			t.Errorf("withoutSecrets(%q, %q) = %q, want %q", tc.text, tc.secret, got, tc.want)
		}
	}
}

// A connection with a password refuses, by default, to authenticate by
// any method but SCRAM; what the operator sets is kept, and a connection
// without a password (trust, peer, certificates) is left alone.
func TestRequireAuthDefault(t *testing.T) {
	t.Setenv("PGREQUIREAUTH", "")
	t.Setenv("PGPASSWORD", "")
	for _, tc := range []struct{ url, want string }{
		{"postgres://u:pw@db/plants", "scram-sha-256"},
		{"postgres://u@db/plants?password=pw", "scram-sha-256"},
		{"postgres://u:pw@db/plants?require_auth=md5", "md5"},
		{"postgres://u:pw@db/plants?require_auth=scram-sha-256,none", "scram-sha-256,none"},
		{"postgres://u:pw@db/plants?require_auth=", ""},
		{"postgres://u@db/plants", ""},
	} {
		cfg, _, err := poolConfig(tc.url, Options{})
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := cfg.ConnConfig.RequireAuth; got != tc.want {
			t.Errorf("%s: require_auth %q, want %q", tc.url, got, tc.want)
		}
	}
	t.Setenv("PGPASSWORD", "from-the-environment")
	if cfg, _, err := poolConfig("postgres://u@db/plants", Options{}); err != nil || cfg.ConnConfig.RequireAuth != "scram-sha-256" {
		t.Errorf("a password from PGPASSWORD: require_auth %q, %v; want scram-sha-256", cfg.ConnConfig.RequireAuth, err)
	}
	t.Setenv("PGREQUIREAUTH", "password")
	if cfg, _, err := poolConfig("postgres://u:pw@db/plants", Options{}); err != nil || cfg.ConnConfig.RequireAuth != "password" {
		t.Errorf("PGREQUIREAUTH=password: require_auth %q, %v; want it kept", cfg.ConnConfig.RequireAuth, err)
	}
}

// passwordThief is a server on loopback, as a man in the middle or a
// hostile server would be, that asks every client for its password in
// clear, or as an MD5 digest, and keeps what it is sent.
type passwordThief struct {
	addr string
	mu   sync.Mutex
	got  []string
}

func newPasswordThief(t *testing.T, md5 bool) *passwordThief {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &passwordThief{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(conn, md5) })
		}
	})
	return p
}

func (p *passwordThief) serve(conn net.Conn, md5 bool) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	be := pgproto3.NewBackend(conn, conn)
	msg, err := be.ReceiveStartupMessage()
	if _, ok := msg.(*pgproto3.SSLRequest); ok && err == nil {
		conn.Write([]byte("N")) // no TLS here; the client's sslmode decides
		msg, err = be.ReceiveStartupMessage()
	}
	if _, ok := msg.(*pgproto3.StartupMessage); !ok || err != nil {
		return
	}
	authType := uint32(pgproto3.AuthTypeCleartextPassword)
	if md5 {
		be.Send(&pgproto3.AuthenticationMD5Password{Salt: [4]byte{1, 2, 3, 4}})
		authType = pgproto3.AuthTypeMD5Password
	} else {
		be.Send(&pgproto3.AuthenticationCleartextPassword{})
	}
	if err := be.Flush(); err != nil {
		return
	}
	be.SetAuthType(authType)
	reply, err := be.Receive()
	if pw, ok := reply.(*pgproto3.PasswordMessage); ok && err == nil {
		p.mu.Lock()
		p.got = append(p.got, pw.Password)
		p.mu.Unlock()
	}
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01", Message: "password authentication failed"})
	be.Flush()
}

func (p *passwordThief) stolen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

// A server that asks for the password in clear or as MD5 gets nothing,
// and the error says why. With require_auth=password the same server does
// get it: the harness would see a leak.
func TestPasswordNeverSentInClear(t *testing.T) {
	t.Setenv("PGREQUIREAUTH", "")
	for _, md5 := range []bool{false, true} {
		thief := newPasswordThief(t, md5)
		url := fmt.Sprintf("postgres://plantstore:hunter2secret@%s/plants?sslmode=disable&connect_timeout=2", thief.addr)
		_, err := Open(context.Background(), url, Options{})
		if err == nil {
			t.Fatalf("md5=%t: Open succeeded against a server that never authenticated", md5)
		}
		if !strings.Contains(err.Error(), "require_auth") {
			t.Errorf("md5=%t: Open: %v; want the error to name require_auth", md5, err)
		}
		if strings.Contains(err.Error(), "hunter2secret") {
			t.Errorf("md5=%t: the error shows the password: %v", md5, err)
		}
		if got := thief.stolen(); len(got) != 0 {
			t.Errorf("md5=%t: the server was sent %q", md5, got)
		}

		_, err = Open(context.Background(), url+"&require_auth=password,md5", Options{})
		if err == nil {
			t.Fatalf("md5=%t: Open succeeded against a server that refuses every password", md5)
		}
		got := thief.stolen()
		if len(got) == 0 || (!md5 && got[0] != "hunter2secret") || (md5 && !strings.HasPrefix(got[0], "md5")) {
			t.Errorf("md5=%t, require_auth=password,md5: the server got %q; the harness does not see what a client sends", md5, got)
		}
	}
}

func TestWarnings(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	t.Setenv("PGREQUIREAUTH", "")
	t.Setenv("PGPASSWORD", "")
	for _, tc := range []struct {
		url  string
		want []string // substrings, one per warning, in order
	}{
		{"postgres://u:pw@db.example.com/plants?sslmode=verify-full", nil},
		{"postgres://u:pw@db.example.com/plants?sslrootcert=system", nil},
		{"postgres://u:pw@db.example.com/plants", []string{"db.example.com is not verified (sslmode=prefer)"}},
		{"postgres://u:pw@db.example.com/plants?sslmode=disable", []string{"sslmode=disable"}},
		{"postgres://u:pw@db.example.com/plants?sslmode=require", []string{"sslmode=require"}},
		{"postgres://u:pw@10.0.0.5/plants?ssl=true", []string{"10.0.0.5 is not verified (sslmode=require)"}},
		{"postgres://u:pw@a.example.com,b.example.com/plants?sslmode=allow", []string{"a.example.com, b.example.com"}},
		{"postgres://u:pw@127.0.0.1/plants?sslmode=disable", nil},
		{"postgres://u:pw@[::1]:5433/plants?sslmode=disable", nil},
		{"postgres://u:pw@localhost/plants?sslmode=disable", nil},
		{"postgres://u:pw@%2Fvar%2Frun%2Fpostgresql/plants?sslmode=disable", nil},
		{"postgres://u:pw@127.0.0.1/plants?sslmode=disable&require_auth=password", []string{"require_auth=password lets the database server, or anyone posing as it, ask for the password in clear (password)"}},
		{"postgres://u:pw@127.0.0.1/plants?sslmode=disable&require_auth=!scram-sha-256", []string{"in clear (password) or as an MD5 digest (md5)"}},
		{"postgres://u:pw@127.0.0.1/plants?sslmode=disable&require_auth=!password,!md5", nil},
		{"postgres://u:pw@127.0.0.1/plants?sslmode=disable&require_auth=scram-sha-256,none", nil},
		{"postgres://u@127.0.0.1/plants?sslmode=disable&require_auth=password", nil}, // no password to give
		{"postgres://u:pw@db.example.com/plants?sslmode=disable&require_auth=", []string{"not verified", "require_auth= lets"}},
		{"mysql://u:pw@db/plants", nil},
	} {
		got := Warnings(tc.url)
		ok := len(got) == len(tc.want)
		for i := 0; ok && i < len(got); i++ {
			ok = strings.Contains(got[i], tc.want[i])
		}
		if !ok {
			t.Errorf("Warnings(%s) = %q, want %q", tc.url, got, tc.want)
		}
		for _, w := range got {
			if strings.Contains(w, "pw@") || strings.Contains(w, ":pw") {
				t.Errorf("Warnings(%s) shows the password: %q", tc.url, w)
			}
		}
	}
	t.Setenv("PGSSLMODE", "verify-full")
	if got := Warnings("postgres://u:pw@db.example.com/plants"); len(got) != 0 {
		t.Errorf("with PGSSLMODE=verify-full: %q", got)
	}
}

// Against a real server: SCRAM with the default require_auth connects;
// a server configured for cleartext passwords, or MD5, is refused before
// the password is sent; and the operator can still choose otherwise.
func TestRequireAuthOnARealServer(t *testing.T) {
	t.Setenv("PGREQUIREAUTH", "")
	srv := pgtest.StartServer(t)
	open := func(url string) error {
		t.Helper()
		db, err := Open(context.Background(), url, Options{})
		if err == nil {
			db.Close()
		}
		return err
	}
	srv.SetHostAuth("scram-sha-256")
	if err := open(srv.PasswordURL()); err != nil {
		t.Fatalf("SCRAM with the default require_auth: %v\n%s", err, srv.Log())
	}
	for _, method := range []string{"password", "md5"} {
		srv.SetHostAuth(method)
		err := open(srv.PasswordURL())
		if err == nil || !strings.Contains(err.Error(), "server requested "+method+" authentication") {
			t.Errorf("server asking by %s: Open = %v, want a require_auth refusal", method, err)
		}
		if err := open(srv.PasswordURL() + "&require_auth=" + method); err != nil {
			t.Errorf("server asking by %s, require_auth=%s in the URL: %v", method, method, err)
		}
	}
	// No password, trust: nothing to protect, nothing refused.
	srv.SetHostAuth("trust")
	if err := open(srv.URL()); err != nil {
		t.Errorf("trust without a password: %v", err)
	}
}
