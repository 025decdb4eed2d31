package pgtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is a PostgreSQL server of one test's own, which the test may stop
// and start again, as a database outage would. Never stop the shared
// server of PLANTSTORE_TEST_POSTGRES: other tests are using it.
type Server struct {
	t    testing.TB
	bin  string // PostgreSQL's programs
	dir  string // the cluster's directory: data/, server.log, the socket
	port int
}

// StartServer creates a cluster in a temporary directory (trust
// authentication, superuser postgres, UTF8), starts it on a free port of
// 127.0.0.1 and stops it and removes its files when t ends. It needs the
// PostgreSQL programs (in $PG_BIN, /usr/lib/postgresql/15/bin or through
// pg_config) and skips t without them. Like NewDatabase, it also skips t
// when PLANTSTORE_TEST_POSTGRES is not set: that variable is how a run
// says it wants the tests that need PostgreSQL.
//
// As root, the cluster belongs to the postgres user and its programs run
// through runuser, since initdb refuses to run as root.
func StartServer(t testing.TB) *Server {
	t.Helper()
	AdminURL(t)
	bin, err := findBin()
	if err != nil {
		t.Skipf("no PostgreSQL server programs: %v", err)
	}
	s := newServer(t, bin)
	if out, err := s.run(filepath.Join(bin, "initdb"), "-D", filepath.Join(s.dir, "data"),
		"-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.startOnFreePort()
	return s
}

// newServer makes the directory of a cluster, owned by its owner, and
// has it stopped and removed when t ends.
func newServer(t testing.TB, bin string) *Server {
	t.Helper()
	// /tmp rather than $TMPDIR or t.TempDir: as root, the postgres user
	// must be able to reach the directory, and /tmp is open to everyone.
	dir, err := os.MkdirTemp("/tmp", "plantstore-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, dir: dir}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			// immediate: the test is over, the data is thrown away.
			if out, err := s.pgCtl("-m", "immediate", "-w", "stop"); err != nil {
				t.Errorf("stop the test's PostgreSQL server: %v\n%s", err, out)
			}
		}
		os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root needs a postgres user to own the cluster (initdb refuses root): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// startOnFreePort starts the server on a free port. Another process may
// take the port between our probe and the server's bind; then it tries
// another.
func (s *Server) startOnFreePort() {
	s.t.Helper()
	for attempt := 1; ; attempt++ {
		s.port = freePort(s.t)
		err := s.start()
		if err == nil {
			return
		}
		if attempt == 5 {
			s.t.Fatalf("start PostgreSQL: %v", err)
		}
	}
}

// StartStandby makes a streaming standby of s, as an operator would
// (pg_basebackup -R, which writes the standby's settings), starts it on a
// port of its own and returns it once it accepts connections. Like s, it
// is stopped and removed when the test ends.
func (s *Server) StartStandby() *Server {
	s.t.Helper()
	standby := newServer(s.t, s.bin)
	if out, err := standby.run(filepath.Join(s.bin, "pg_basebackup"), "-D", filepath.Join(standby.dir, "data"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres", "-R", "-X", "stream", "-c", "fast"); err != nil {
		s.t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	standby.startOnFreePort()
	return standby
}

// Promote ends a standby's recovery (pg_ctl promote) and returns once it
// takes writes, on a new timeline.
func (s *Server) Promote() {
	s.t.Helper()
	if out, err := s.pgCtl("-w", "-t", "60", "promote"); err != nil {
		s.t.Fatalf("promote the standby: %v\n%s", err, out)
	}
}

// StartAsPrimary starts a stopped standby as a primary without promoting
// it, as an operator who removes standby.signal does: it recovers what WAL
// it has and takes writes on the same timeline.
func (s *Server) StartAsPrimary() {
	s.t.Helper()
	if err := os.Remove(filepath.Join(s.dir, "data", "standby.signal")); err != nil {
		s.t.Fatal(err)
	}
	s.Start()
}

// Crash stops the server as a crash would (pg_ctl stop -m immediate): no
// shutdown checkpoint, and no last WAL sent to its standbys.
func (s *Server) Crash() {
	s.t.Helper()
	s.stop("immediate")
}

// URL is the server's admin URL, for its database postgres. It stays the
// same across Stop and Start.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Stop shuts the server down as an administrator would (pg_ctl stop -m
// fast): sessions are ended, new connections refused.
func (s *Server) Stop() {
	s.t.Helper()
	s.stop("fast")
}

// stop stops the server with pg_ctl's shutdown mode and waits for it.
func (s *Server) stop(mode string) {
	s.t.Helper()
	if out, err := s.pgCtl("-m", mode, "-w", "stop"); err != nil {
		s.t.Fatalf("stop PostgreSQL (-m %s): %v\n%s", mode, err, out)
	}
}

// Start starts the stopped server again, on the same port, and returns
// once it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("restart PostgreSQL on port %d: %v", s.port, err)
	}
}

// Password is the postgres role's password once SetHostAuth has run.
const Password = "pgtest-password"

// SetHostAuth makes the server authenticate connections over TCP with
// method (scram-sha-256, md5, password, trust: a pg_hba.conf method) and
// gives the postgres role the password Password; the Unix socket stays on
// trust. It returns once the server has reloaded its configuration.
func (s *Server) SetHostAuth(method string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Constants, not values from anywhere: ALTER ROLE takes no parameters.
	// The md5 method needs the password stored as MD5, or the server uses
	// SCRAM instead.
	setPassword := "SET password_encryption = 'scram-sha-256'; ALTER ROLE postgres PASSWORD 'pgtest-password'"
	if method == "md5" {
		setPassword = "SET password_encryption = 'md5'; ALTER ROLE postgres PASSWORD 'pgtest-password'"
	}
	// Over the Unix socket, which stays on trust whatever TCP asks.
	socket := fmt.Sprintf("postgres://postgres@/postgres?host=%s&port=%d", url.QueryEscape(s.dir), s.port)
	if err := adminExec(ctx, socket, setPassword); err != nil {
		s.t.Fatalf("set the postgres role's password: %v", err)
	}
	data := filepath.Join(s.dir, "data")
	hba := fmt.Sprintf("local all all trust\nhost all all 127.0.0.1/32 %s\nhost all all ::1/128 %s\n", method, method)
	path := filepath.Join(data, "pg_hba.conf")
	// initdb wrote the file: rewritten, it keeps its owner (the server's
	// user, when we run as root) and its mode.
	if err := os.WriteFile(path, []byte(hba), 0o600); err != nil {
		s.t.Fatal(err)
	}
	if out, err := s.pgCtl("reload"); err != nil {
		s.t.Fatalf("pg_ctl reload: %v\n%s", err, out)
	}
	// reload only signals the server; wait until it answers by the new rule.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := adminExec(ctx, s.PasswordURL(), "SELECT 1")
		noPassword := adminExec(ctx, s.URL(), "SELECT 1")
		if err == nil && (method == "trust") == (noPassword == nil) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the server does not authenticate by %s after reload: %v / %v\n%s", method, err, noPassword, tail(s.Log(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PasswordURL is URL with Password in it, for a server after SetHostAuth.
func (s *Server) PasswordURL() string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", Password, s.port)
}

// Log is the server's log so far, for a failing test to show.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	return string(b)
}

func (s *Server) start() error {
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=100 -c shared_buffers=32MB", s.port, s.dir)
	out, err := s.pgCtl("-l", filepath.Join(s.dir, "server.log"), "-w", "-t", "60", "-o", opts, "start")
	if err != nil {
		return fmt.Errorf("%v\n%s\n%s", err, out, tail(s.Log(), 20))
	}
	return nil
}

func (s *Server) pgCtl(args ...string) (string, error) {
	return s.run(filepath.Join(s.bin, "pg_ctl"), append([]string{"-D", filepath.Join(s.dir, "data")}, args...)...)
}

// run runs a PostgreSQL program as the cluster's owner. Its output goes
// to a file, not a pipe: a server the program leaves running would hold a
// pipe open, and waiting for its end would wait for the server.
func (s *Server) run(name string, args ...string) (string, error) {
	if os.Geteuid() == 0 {
		args = append([]string{"-u", "postgres", "--", name}, args...)
		name = "runuser"
	}
	out, err := os.CreateTemp("", "pgtest-out-")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = s.dir // the cluster owner can enter it
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	b, _ := os.ReadFile(out.Name())
	return string(b), err
}

func findBin() (string, error) {
	for _, dir := range []string{os.Getenv("PG_BIN"), "/usr/lib/postgresql/15/bin"} {
		if dir != "" && executable(filepath.Join(dir, "initdb")) && executable(filepath.Join(dir, "pg_ctl")) {
			return dir, nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if executable(filepath.Join(dir, "initdb")) && executable(filepath.Join(dir, "pg_ctl")) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("initdb and pg_ctl not found in $PG_BIN, /usr/lib/postgresql/15/bin or pg_config --bindir")
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
