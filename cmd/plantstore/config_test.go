package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every flag also reads PLANTSTORE_<NAME>, or the file PLANTSTORE_<NAME>_FILE
// names, as container platforms mount secrets.
func TestConfigurationFromFiles(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(t.TempDir(), "secret path.db")
	dbFile := filepath.Join(t.TempDir(), "db-url")
	if err := os.WriteFile(dbFile, []byte(db+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, dir, []string{"PLANTSTORE_DB_FILE=" + dbFile}, "token", "create", "--name", "from-file")
	if r.exit != 0 || !tokenShape.MatchString(r.stdout) {
		t.Fatalf("token create with PLANTSTORE_DB_FILE: exit %d, %q, %q", r.exit, r.stdout, r.stderr)
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("the store named in the file (newline trimmed) was not used: %v", err)
	}
	if r := cli(t, dir, nil, "token", "list", "--db", db); !strings.Contains(r.stdout, "from-file") {
		t.Errorf("the token is not in the store named by the file:\n%s", r.stdout)
	}

	// The token for the plants commands, from a file.
	s := serve(t, dir, "--db", db)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(mustToken(t, dir, "--name", "cli", "--db", db)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, dir, []string{"PLANTSTORE_SERVER=" + s.url, "PLANTSTORE_TOKEN_FILE=" + tokenFile}, "plants", "add", "--id", "1", "--name", "fern")
	if r.exit != 0 {
		t.Fatalf("plants add with PLANTSTORE_TOKEN_FILE: exit %d, %s", r.exit, r.stderr)
	}

	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"PLANTSTORE_DB=" + db, "PLANTSTORE_DB_FILE=" + dbFile}, "PLANTSTORE_DB and PLANTSTORE_DB_FILE are both set"},
		{[]string{"PLANTSTORE_DB_FILE=" + filepath.Join(dir, "missing")}, "PLANTSTORE_DB_FILE"},
	} {
		r := cli(t, dir, tc.env, "token", "list")
		if r.exit != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("token list with %v: exit %d, %q; want 2 and %q", tc.env, r.exit, r.stderr, tc.want)
		}
	}
	// A secret read from a file is never echoed, even when it is refused.
	badFile := filepath.Join(t.TempDir(), "timeout")
	os.WriteFile(badFile, []byte("sekrit-not-a-duration"), 0o600)
	r = cli(t, dir, []string{"PLANTSTORE_BUSY_TIMEOUT_FILE=" + badFile}, "token", "list")
	if r.exit != 2 || strings.Contains(r.stderr, "sekrit") || !strings.Contains(r.stderr, "PLANTSTORE_BUSY_TIMEOUT_FILE") {
		t.Errorf("a malformed value from a file: exit %d, %q", r.exit, r.stderr)
	}
	// Nor when the command's own check of it refuses it: an address, a
	// URL, a path, a short word.
	secretFile := filepath.Join(t.TempDir(), "value")
	for _, c := range []struct {
		value, variable string
		args            []string
		exit            int
		part            string // quoted apart from the whole by the error
	}{
		{"SECRETVALUE", "PLANTSTORE_ADDR_FILE", []string{"serve"}, 2, ""},
		{"SECRETVALUE", "PLANTSTORE_PUBLIC_URL_FILE", []string{"serve", "--addr", "127.0.0.1:0"}, 2, ""},
		{"SECRETVALUE", "PLANTSTORE_SERVER_FILE", []string{"plants", "get", "7", "--token", "pst_x"}, 2, ""},
		{"http://127.0.0.1:1/s3cretprefix", "PLANTSTORE_SERVER_FILE", []string{"plants", "get", "7", "--token", "pst_x"}, 1, "127.0.0.1:1"},
		{"/nonexistent/s3cret.db", "PLANTSTORE_DB_FILE", []string{"token", "list"}, 1, ""},
		{"/nonexistent-s3cretdir/sub/s3cret.db", "PLANTSTORE_DB_FILE", []string{"token", "list"}, 1, "/nonexistent-s3cretdir/sub"},
		{"xml", "PLANTSTORE_LOG_FORMAT_FILE", []string{"serve", "--addr", "127.0.0.1:0"}, 2, ""},
		// Short parts too, and a relative path that the message shows
		// made absolute.
		{"./nodir/x.db", "PLANTSTORE_DB_FILE", []string{"token", "list"}, 1, "nodir"},
		{"nohost.invalid:18199", "PLANTSTORE_ADDR_FILE", []string{"serve"}, 1, "nohost"},
		{"./nodir/x.db", "PLANTSTORE_DB_FILE", []string{"token", "list"}, 1, "x.db"},
		{"postgres://u:PW_FROM_FILE@[::1]:1/x?connect_timeout=2", "PLANTSTORE_DB_FILE", []string{"token", "list"}, 1, "[::1]:1"},
		// Go's own error shows the URL with its password as ***: no
		// longer the whole value, its path and user name still are.
		{"http://someuser:PW_FROM_FILE@127.0.0.1:1/tenant-SECRET123", "PLANTSTORE_SERVER_FILE", []string{"plants", "get", "7", "--token", "pst_x"}, 1, "tenant-SECRET123"},
		// pgx's error names the user and the database; a user or database
		// named plantstore is taken out there, not from every message.
		{"postgres://someuser:PW_FROM_FILE@127.0.0.1:1/secretdb1?sslmode=disable&connect_timeout=2", "PLANTSTORE_DB_FILE", []string{"token", "list"}, 1, "secretdb1"},
		{"postgres://plantstore:PW_FROM_FILE@127.0.0.1:1/plantstore?sslmode=disable&connect_timeout=2", "PLANTSTORE_DB_FILE", []string{"token", "list"}, 1, "user=plantstore"},
	} {
		if err := os.WriteFile(secretFile, []byte(c.value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := cli(t, dir, []string{c.variable + "=" + secretFile}, c.args...)
		if r.exit != c.exit || strings.Contains(r.stderr, c.value) || !strings.Contains(r.stderr, "value in "+c.variable+">") && !strings.HasPrefix(c.value, "postgres:") ||
			c.part != "" && strings.Contains(r.stderr, c.part) {
			t.Errorf("%s refused by %q: exit %d (want %d), stderr %q", c.variable, c.args, r.exit, c.exit, r.stderr)
		}
		if strings.Contains(r.stderr, "PW_FROM_FILE") || strings.Contains(r.stderr, "someuser") {
			t.Errorf("%s: stderr shows part of the value: %q", c.variable, r.stderr)
		}
		if !strings.HasPrefix(r.stderr, "plantstore: ") {
			t.Errorf("%s: the message is garbled: %q", c.variable, r.stderr)
		}
	}
	// A loopback host is no secret, and the messages' examples name one:
	// they stay whole.
	if err := os.WriteFile(secretFile, []byte("127.0.0.1:99999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, dir, []string{"PLANTSTORE_ADDR_FILE=" + secretFile}, "serve")
	if r.exit != 2 || strings.Contains(r.stderr, "127.0.0.1:99999") || !strings.Contains(r.stderr, "such as 127.0.0.1:8080") {
		t.Errorf("PLANTSTORE_ADDR_FILE refused by serve: exit %d, stderr %q", r.exit, r.stderr)
	}
	// Nor as a default in --help.
	serverFile := writeFile(t, "http://someuser:PW_FROM_FILE@127.0.0.1:1/tenant-SECRET123\n")
	r = cli(t, dir, []string{"PLANTSTORE_SERVER_FILE=" + serverFile}, "plants", "get", "--help")
	if strings.Contains(r.stdout, "PW_FROM_FILE") || strings.Contains(r.stdout, "tenant-SECRET123") || !strings.Contains(r.stdout, "(default: the value in PLANTSTORE_SERVER_FILE)") {
		t.Errorf("--help with PLANTSTORE_SERVER_FILE:\n%s", r.stdout)
	}
	// A password in PLANTSTORE_SERVER itself is masked where the URL is
	// shown: in --help and in the error that names the server.
	withPassword := []string{"PLANTSTORE_SERVER=http://someuser:SECRETPW@127.0.0.1:1"}
	r = cli(t, dir, withPassword, "plants", "get", "--help")
	if strings.Contains(r.stdout, "SECRETPW") || !strings.Contains(r.stdout, "127.0.0.1:1") {
		t.Errorf("--help with a password in PLANTSTORE_SERVER:\n%s", r.stdout)
	}
	r = cli(t, dir, withPassword, "plants", "get", "7", "--token", "pst_x")
	if r.exit != 1 || strings.Contains(r.stderr, "SECRETPW") || !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Errorf("an unreachable server with a password: exit %d, %q", r.exit, r.stderr)
	}
	r = cli(t, dir, nil, "plants", "get", "7", "--token", "pst_x", "--server", "htp://someuser:SECRETPW@127.0.0.1:1")
	if r.exit != 2 || strings.Contains(r.stderr, "SECRETPW") || !strings.Contains(r.stderr, "someuser") {
		t.Errorf("a --server of the wrong scheme with a password: exit %d, %q", r.exit, r.stderr)
	}
}

// A misspelt variable stops serve with a message that names it.
func TestUnknownVariableStopsServe(t *testing.T) {
	dir := t.TempDir()
	r := cli(t, dir, []string{"PLANTSTORE_ADRR=0.0.0.0:80"}, "serve", "--addr", "127.0.0.1:0")
	if r.exit != 2 || !strings.Contains(r.stderr, "PLANTSTORE_ADRR") {
		t.Errorf("serve with PLANTSTORE_ADRR: exit %d, %q; want 2 naming it", r.exit, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "plantstore.db")); err == nil {
		t.Error("the refused start created the store")
	}
	// The plants commands' variables, and _FILE forms, are not unknown:
	// serve starts with them set (it inherits this process's environment).
	t.Setenv("PLANTSTORE_TOKEN", "x")
	t.Setenv("PLANTSTORE_SERVER", "http://127.0.0.1:1")
	t.Setenv("PLANTSTORE_LOG_FORMAT_FILE", writeFile(t, "json\n"))
	serve(t, dir)
}

// A value refused for what it is (not its form) names the variable it
// came from, where a mistake in a deployment's environment is looked
// for; from the command line, the flag alone.
func TestRefusedValueNamesItsVariable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		env, args []string
		want      string
	}{
		{[]string{"PLANTSTORE_MAX_BODY_BYTES=0"}, nil, "plantstore: --max-body-bytes (from PLANTSTORE_MAX_BODY_BYTES) 0: want 1 or more"},
		{[]string{"PLANTSTORE_LOG_LEVEL_FILE=" + writeFile(t, "verbose\n")}, nil, `plantstore: --log-level (from PLANTSTORE_LOG_LEVEL_FILE) "<the value in PLANTSTORE_LOG_LEVEL_FILE>": want`},
		{[]string{"PLANTSTORE_WEBHOOK_WORKERS=0"}, nil, "plantstore: --webhook-workers (from PLANTSTORE_WEBHOOK_WORKERS) must be between"},
		{[]string{"PLANTSTORE_MAX_BODY_BYTES=0"}, []string{"--max-body-bytes=0"}, "plantstore: --max-body-bytes 0: want 1 or more"},
		{nil, []string{"--max-body-bytes", "0"}, "plantstore: --max-body-bytes 0: want 1 or more"},
	} {
		r := cli(t, dir, c.env, append([]string{"serve", "--addr", "127.0.0.1:0"}, c.args...)...)
		if r.exit != 2 || !strings.HasPrefix(r.stderr, c.want) {
			t.Errorf("serve %v with %v: exit %d, %q; want 2 and %q", c.args, c.env, r.exit, r.stderr, c.want)
		}
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serve says at start, at warn, what exposes the store: here, a store file
// other local users can read (made so before plantstore created its files
// 0600).
func TestServeWarnsOfReadableStore(t *testing.T) {
	dir := t.TempDir()
	mustToken(t, dir, "--name", "me") // creates the store, 0600
	path := filepath.Join(dir, "plantstore.db")
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	s := serve(t, dir)
	logs := s.logs.String()
	if !strings.Contains(logs, `"level":"WARN","msg":"store files are open to other local users: `+path+` (0644)`) {
		t.Errorf("no warning of the readable store:\n%s", logs)
	}
}

// An empty --db, from the command line or an empty _FILE, and a database
// URL that does not parse are usage mistakes (exit 2), said as such; the
// URL's password is not shown.
func TestStoreFlagMistakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"token", "list", "--db", ""}, "--db: empty"},
		{[]string{"PLANTSTORE_DB_FILE=" + empty}, []string{"token", "list"}, "empty"},
		{nil, []string{"token", "list", "--db", "postgres://u:sekritpw@db:99999999/plants"}, "invalid database URL"},
		{nil, []string{"token", "create", "--name", "x", "--db", "postgres://u:sekritpw@db:99999999/plants"}, "invalid database URL"},
		{nil, []string{"serve", "--addr", "127.0.0.1:0", "--db", "postgres://u:sekritpw@db:99999999/plants"}, "invalid database URL"},
	} {
		r := cli(t, dir, c.env, c.args...)
		if r.exit != 2 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "sekritpw") || strings.Contains(r.stderr, "---") {
			t.Errorf("%v %q: exit %d, stderr %q; want 2 and %q", c.env, c.args, r.exit, r.stderr, c.want)
		}
	}
}

// At --log-level debug, serve's first line is every setting with where it
// came from, the database's password masked; at info there is no such
// line.
func TestDebugLogShowsTheSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A server that cannot be reached: serve logs its settings, then
	// fails to open the store.
	args := []string{"serve", "--addr", "127.0.0.1:0", "--db", "postgres://plants:sekrit@127.0.0.1:1/plants", "--log-level", "debug"}
	r := cli(t, dir, []string{"PLANTSTORE_MAX_BODY_BYTES=2048"}, args...)
	line, _, _ := strings.Cut(r.stderr, "\n")
	for _, want := range []string{
		`"level":"DEBUG","msg":"settings"`,
		`"db":{"value":"postgres://plants:xxxxx@127.0.0.1:1/plants","from":"flag"}`,
		`"max-body-bytes":{"value":"2048","from":"PLANTSTORE_MAX_BODY_BYTES"}`,
		`"request-timeout":{"value":"10s","from":"default"}`,
	} {
		if !strings.Contains(line, want) {
			t.Errorf("the first line lacks %s:\n%s", want, r.stderr)
		}
	}
	if r.exit != 1 || strings.Contains(r.stderr, "sekrit") {
		t.Errorf("exit %d, stderr:\n%s", r.exit, r.stderr)
	}
	r = cli(t, dir, []string{"PLANTSTORE_MAX_BODY_BYTES=2048"}, args[:len(args)-2]...)
	if strings.Contains(r.stderr, `"settings"`) {
		t.Errorf("settings logged at info:\n%s", r.stderr)
	}
}

// The server's own messages quote the user, the role and the database a
// URL names: from a _FILE value, those are taken out too, where quoted.
func TestServerMessagesLoseFileValueNames(t *testing.T) {
	file := writeFile(t, "postgres://someuser:PW@db.internal:5432/secretdb1\n")
	env := environment{vars: map[string]string{"PLANTSTORE_DB_FILE": file}}
	err := withoutFileValues(errors.New(`open postgres: FATAL: password authentication failed for user "someuser" (SQLSTATE 28P01); role "someuser" does not exist; database "secretdb1" does not exist`), env)
	if msg := err.Error(); strings.Contains(msg, "someuser") || strings.Contains(msg, "secretdb1") ||
		!strings.Contains(msg, `for user "<part of the value in PLANTSTORE_DB_FILE>" (SQLSTATE`) {
		t.Errorf("the server's message from a _FILE URL: %s", msg)
	}
}
