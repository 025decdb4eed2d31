package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/apitest"
)

// What a new user meets first (issue 17): variables, new stores, the
// quick start's token, the root and /docs/, and the command line's
// mistakes.

// Variables of the other commands never stop serve; PLANTSTORE_ALL, named
// after a flag read from the command line only, is ignored with a word;
// a near miss is refused with the variable it nearly is.
func TestOtherCommandsVariablesDoNotStopServe(t *testing.T) {
	dir := t.TempDir()
	r := cli(t, dir, []string{"PLANTSTORE_MAX_BODY_BYTE=100"}, "serve", "--addr", "127.0.0.1:0")
	if r.exit != 2 || !strings.Contains(r.stderr, "unknown configuration variable PLANTSTORE_MAX_BODY_BYTE (did you mean PLANTSTORE_MAX_BODY_BYTES?)") {
		t.Errorf("a misspelt variable: exit %d, %q", r.exit, r.stderr)
	}
	if r := cli(t, dir, []string{"PLANTSTORE_FROBNICATE=1"}, "serve", "--addr", "127.0.0.1:0"); r.exit != 2 || strings.Contains(r.stderr, "did you mean") {
		t.Errorf("a variable like no other: exit %d, %q; want 2 and no guess", r.exit, r.stderr)
	}
	token := mustToken(t, dir, "--name", "me")
	for _, kv := range []string{"PLANTSTORE_JSON=true", "PLANTSTORE_ALL=true", "PLANTSTORE_TOKEN=" + token, "PLANTSTORE_SERVER=http://127.0.0.1:1"} {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
	s := serve(t, dir)
	if !s.logged(`"level":"WARN","msg":"ignoring PLANTSTORE_ALL: no command reads it (--all is given on the command line)"`, 5*time.Second) {
		t.Errorf("no word on PLANTSTORE_ALL:\n%s", s.logs)
	}
	for id := int64(1); id <= 3; id++ {
		create(t, apitest.Client(t), s.url, token, plantBody(id))
	}
	// PLANTSTORE_JSON applies; PLANTSTORE_ALL does not make one page all.
	r = cli(t, dir, []string{"PLANTSTORE_SERVER=" + s.url}, "plants", "list", "--limit", "2")
	var plants []struct{ ID int64 }
	if err := json.Unmarshal([]byte(r.stdout), &plants); err != nil || len(plants) != 2 {
		t.Errorf("plants list --limit 2 with PLANTSTORE_ALL and PLANTSTORE_JSON set: %v, %+v", err, r)
	}
	if !strings.Contains(r.stderr, "ignoring PLANTSTORE_ALL: --all is read from the command line only") {
		t.Errorf("plants list says nothing of PLANTSTORE_ALL: %q", r.stderr)
	}
	// The variable named is the one set.
	r = cli(t, dir, []string{"PLANTSTORE_SERVER=" + s.url, "PLANTSTORE_ALL=", "PLANTSTORE_ALL_FILE=x"}, "plants", "list", "--limit", "2")
	if !strings.Contains(r.stderr, "ignoring PLANTSTORE_ALL_FILE: --all") || strings.Contains(r.stderr, "ignoring PLANTSTORE_ALL:") {
		t.Errorf("plants list with PLANTSTORE_ALL_FILE set: %q", r.stderr)
	}
}

// Each flag either reads its variable or is in commandLineOnly, and
// docs/configuration.md documents every variable and names every flag
// that has none: the code and the documentation agree.
func TestVariablesDocumented(t *testing.T) {
	known := knownVariables()
	for env, flag := range known.commandLineOnly {
		if !commandLineOnly[strings.TrimPrefix(flag, "--")] {
			t.Errorf("%s reads no variable (%s) but is not in commandLineOnly: add it there, or read the variable", flag, env)
		}
	}
	for name := range commandLineOnly {
		if known.read[envName(name)] {
			t.Errorf("--%s is in commandLineOnly, yet %s is read", name, envName(name))
		}
	}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range known.read {
		if !strings.HasSuffix(name, "_FILE") && !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/configuration.md does not document %s", name)
		}
	}
	for _, flag := range known.commandLineOnly {
		if !strings.Contains(string(doc), "`"+flag+"`") {
			t.Errorf("docs/configuration.md does not name %s among the flags read from the command line only", flag)
		}
	}
}

// Only token create and serve make a store, and each says which file;
// every other command fails on a missing store, naming it, and makes
// nothing.
func TestNoSilentStores(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "plantstore.db")
	for _, args := range [][]string{
		{"token", "list"}, {"token", "list", "--json"}, {"token", "revoke", "me"},
		{"webhook", "list"}, {"webhook", "add", "https://hooks.example.com/plants"}, {"webhook", "remove", "1"},
	} {
		r := cli(t, dir, nil, args...)
		if r.exit != 1 || !strings.Contains(r.stderr, "there is no store at "+path+"; plantstore serve or plantstore token create makes one") {
			t.Errorf("%q without a store: exit %d, %q", args, r.exit, r.stderr)
		}
	}
	if r := cli(t, dir, nil, "backup", "--to", "copy.db"); r.exit != 1 || !strings.Contains(r.stderr, "no store") {
		t.Errorf("backup without a store: exit %d, %q", r.exit, r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("commands without a store left files: %v", entries)
	}

	r := cli(t, dir, nil, "token", "create", "--name", "me")
	if r.exit != 0 || !strings.Contains(r.stderr, "created a new store: "+path+"\n") {
		t.Errorf("token create on no store: exit %d, %q", r.exit, r.stderr)
	}
	if r := cli(t, dir, nil, "token", "create", "--name", "other"); r.exit != 0 || strings.Contains(r.stderr, "created a new store") {
		t.Errorf("token create on a store: exit %d, %q", r.exit, r.stderr)
	}

	other := t.TempDir()
	s := serve(t, other)
	if !s.logged(`"msg":"created a new store","path":"`+filepath.Join(other, "plantstore.db")+`"`, 5*time.Second) {
		t.Errorf("serve does not say it made the store:\n%s", s.logs)
	}
	// A log kept to warnings still says it: a mistyped --db must not
	// serve an empty store in silence.
	quiet := t.TempDir()
	s, _ = launch(t, quiet, "--log-level", "warn") // which keeps the listening line out
	if !s.logged(`"level":"WARN","msg":"created a new store","path":"`+filepath.Join(quiet, "plantstore.db")+`"`, 5*time.Second) {
		t.Errorf("serve --log-level warn does not say it made the store:\n%s", s.logs)
	}
}

// A --db that names a file not plantstore's is refused by every command
// that opens a store, exit 1, saying what the file is, and the file is
// left as it was: a text file, and another program's SQLite database.
func TestStoreOfSomethingElseRefused(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notes, []byte("not a database\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.db")
	odb, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := odb.Exec(`CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)`); err != nil {
		t.Fatal(err)
	}
	odb.Close()
	for path, want := range map[string]string{
		notes: notes + " is not a SQLite database",
		other: other + " is a SQLite database of something else (its tables: customers)",
	} {
		before, _ := os.ReadFile(path)
		for _, args := range [][]string{{"token", "create", "--name", "me"}, {"token", "list"}} {
			r := cli(t, dir, nil, append(args, "--db", path)...)
			if r.exit != 1 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "internal") {
				t.Errorf("%q --db %s: exit %d, %q; want 1 and %q", args, path, r.exit, r.stderr, want)
			}
			// Only a command that makes a store says where it would.
			if makes := strings.Contains(r.stderr, "a new store is made"); makes != (args[1] == "create") && path == notes {
				t.Errorf("%q --db %s: %q", args, path, r.stderr)
			}
		}
		// serve, bounded: one that takes the file would serve on.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, binary, "serve", "--addr", "127.0.0.1:0", "--db", path).CombinedOutput()
		cancel()
		if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != 1 || !strings.Contains(string(out), want) {
			t.Errorf("serve --db %s: %v, %s; want exit 1 and %q", path, err, out, want)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
			t.Errorf("the commands changed %s", path)
		}
	}
	// Nothing left beside them either: no lock file, no log.
	if names, want := apitest.DirNames(t, dir), []string{"notes.txt", "other.db"}; !slices.Equal(names, want) {
		t.Errorf("after the refusals the directory holds %q, want %q", names, want)
	}
}

// A store in a missing directory, in a directory this user may not write,
// or in a file this user may not write, is refused at once, with the path
// and the cause: not after the busy timeout, and not in SQLite's words.
func TestUnusableStoreFailsAtOnce(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "such", "dir", "x.db")
	for _, args := range [][]string{{"token", "create", "--name", "me"}, {"token", "list"}, {"serve", "--addr", "127.0.0.1:0"}} {
		start := time.Now()
		r := cli(t, dir, nil, append(args, "--db", missing)...)
		took := time.Since(start)
		want := "the store " + missing + " is in a directory that does not exist (" + filepath.Dir(missing) + ")"
		if r.exit != 1 || !strings.Contains(r.stderr, want) || took > 3*time.Second {
			t.Errorf("%q in a missing directory: exit %d after %v, %q; want 1 at once and %q", args, r.exit, took.Round(time.Millisecond), r.stderr, want)
		}
	}

	// Permissions: as another user when the tests run as root, whom no
	// permission stops.
	run := cli
	if os.Geteuid() == 0 {
		run = cliAsNobody
		for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
			os.Chmod(d, 0o755)
		}
	}
	// The store's file is root's when root made it, and then the cure is
	// to give it to the user; a file of the user's own is read-only.
	readOnlyHint := " (the file is read-only: chmod u+w " + filepath.Join(dir, "rw", "plantstore.db") + ")"
	if os.Geteuid() == 0 {
		readOnlyHint = " (the file is root's, not this user's: made by a command run as root? chown the store's files, " + filepath.Join(dir, "rw", "plantstore.db") + " and its -wal, -shm and .lock, to the user that runs plantstore)"
	}
	readOnlyDir := filepath.Join(dir, "ro")
	withStore := filepath.Join(dir, "ro-with-store")
	readOnlyStore := filepath.Join(dir, "rw")
	unreadable := filepath.Join(dir, "unreadable")
	aDirectory := filepath.Join(readOnlyDir, "sub")
	for _, d := range []string{readOnlyDir, withStore, readOnlyStore, unreadable, aDirectory} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Writable again, or a user not root could not remove them.
	t.Cleanup(func() {
		os.Chmod(readOnlyDir, 0o755)
		os.Chmod(withStore, 0o755)
	})
	mustToken(t, withStore, "--name", "me")
	mustToken(t, readOnlyStore, "--name", "me")
	os.Chmod(filepath.Join(withStore, "plantstore.db"), 0o666)
	mustToken(t, unreadable, "--name", "me")
	os.Chmod(unreadable, 0o777)
	os.Chmod(filepath.Join(unreadable, "plantstore.db"), 0o200)
	os.Chmod(readOnlyStore, 0o777)
	os.Chmod(filepath.Join(readOnlyStore, "plantstore.db"), 0o444)
	os.Chmod(readOnlyDir, 0o555)
	os.Chmod(withStore, 0o555)
	for _, tc := range []struct {
		dir  string
		args []string
		want string
	}{
		{readOnlyDir, []string{"token", "create", "--name", "me"}, "the store " + filepath.Join(readOnlyDir, "plantstore.db") + ": cannot create files in its directory " + readOnlyDir + " (SQLite keeps its log there): permission denied"},
		{withStore, []string{"token", "list"}, "cannot create files in its directory " + withStore},
		{withStore, []string{"serve", "--addr", "127.0.0.1:0"}, "cannot create files in its directory " + withStore},
		{withStore, []string{"backup", "--to", filepath.Join(readOnlyStore, "b.db")}, "cannot create files in its directory " + withStore},
		{readOnlyStore, []string{"serve", "--addr", "127.0.0.1:0"}, "the store " + filepath.Join(readOnlyStore, "plantstore.db") + " cannot be opened for writing: permission denied" + readOnlyHint},
		// A directory for the store, in a directory it may not write.
		{dir, []string{"token", "list", "--db", aDirectory}, "the store " + aDirectory + " cannot be opened for writing: is a directory"},
		{readOnlyStore, []string{"token", "create", "--name", "other"}, "cannot be opened for writing: permission denied"},
		{unreadable, []string{"backup", "--to", filepath.Join(unreadable, "b.db")}, "the store cannot be read: permission denied"},
	} {
		start := time.Now()
		r := run(t, tc.dir, nil, tc.args...)
		took := time.Since(start)
		if r.exit != 1 || !strings.Contains(r.stderr, tc.want) || took > 3*time.Second {
			t.Errorf("%q in %s: exit %d after %v, %q; want 1 at once and %q", tc.args, filepath.Base(tc.dir), r.exit, took.Round(time.Millisecond), r.stderr, tc.want)
		}
	}

	// A store its user may write, beside files a run as root left (a log
	// after a kill, the lock file), each root's alone: named, with the
	// cure, not SQLite's "unable to open database file (14)".
	if os.Geteuid() != 0 {
		return // no other user's files to make
	}
	const hint = "(the file is root's, not this user's: made by a command run as root? chown the store's files"
	for _, left := range []string{"plantstore.db-wal", "plantstore.db.lock"} {
		d := filepath.Join(dir, "root-left"+filepath.Ext(left))
		os.Mkdir(d, 0o755)
		mustToken(t, d, "--name", "me")
		if err := os.WriteFile(filepath.Join(d, left), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chown(d, 65534, 65534)
		os.Chown(filepath.Join(d, "plantstore.db"), 65534, 65534)
		r := run(t, d, nil, "serve", "--addr", "127.0.0.1:0")
		if r.exit != 1 || !strings.Contains(r.stderr, filepath.Join(d, left)) || !strings.Contains(r.stderr, "permission denied "+hint) {
			t.Errorf("serve beside a %s of root's: exit %d, %q", left, r.exit, r.stderr)
		}
	}
}

// cliAsNobody is cli as the user nobody (65534), for tests of
// permissions run as root.
func cliAsNobody(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	os.Chmod(filepath.Dir(binary), 0o755)
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if exit, ok := err.(*exec.ExitError); ok {
		r.exit = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// The quick start's "token create --name me" can be run again: without
// --replace it says what to do and prints nothing to capture; with it the
// new token works and the old one does not.
func TestTokenCreateReplace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := serve(t, dir)
	old := mustToken(t, dir, "--name", "me")
	r := cli(t, dir, nil, "token", "create", "--name", "me")
	if r.exit != 1 || r.stdout != "" || !strings.Contains(r.stderr, `an active token is already named "me": add --replace to revoke it and issue a new one, or choose another --name`) {
		t.Errorf("token create on a taken name: %+v", r)
	}
	r = cli(t, dir, nil, "token", "create", "--name", "me", "--replace")
	if r.exit != 0 || !tokenShape.MatchString(r.stdout) || !strings.Contains(r.stderr, `revoked the token "me" it replaces`) {
		t.Fatalf("token create --replace: %+v", r)
	}
	replacement := strings.TrimSpace(r.stdout)
	if status, body := create(t, apitest.Client(t), s.url, replacement, plantBody(1)); status != 200 {
		t.Errorf("the replacement: %d %s", status, body)
	}
	if status, _ := create(t, apitest.Client(t), s.url, old, plantBody(1)); status != 401 {
		t.Errorf("the replaced token: %d, want 401", status)
	}
	// --replace on a free name simply creates.
	if r := cli(t, dir, nil, "token", "create", "--name", "fresh", "--replace"); r.exit != 0 || strings.Contains(r.stderr, "revoked") {
		t.Errorf("token create --replace on a free name: %+v", r)
	}
	r = cli(t, dir, nil, "token", "list", "--json")
	var tokens []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &tokens); err != nil || r.exit != 0 || len(tokens) != 2 {
		t.Fatalf("token list --json: %v, %+v", err, r)
	}
	me := slices.IndexFunc(tokens, func(t map[string]any) bool { return t["name"] == "me" })
	if me < 0 || tokens[me]["scopes"] == nil || tokens[me]["created_at"] == nil || strings.Contains(r.stdout, "pst_") {
		t.Errorf("token list --json: %s", r.stdout)
	}
	if r := cli(t, dir, nil, "token", "list", "--all", "--json"); strings.Count(r.stdout, `"revoked_at"`) != 1 {
		t.Errorf("token list --all --json shows no revocation:\n%s", r.stdout)
	}
}

// GET / points a person, or a program, to the reference and the
// document; /docs/ leads to /docs; the listening line says where the
// reference is.
func TestRootAndDocsURL(t *testing.T) {
	s := serve(t, t.TempDir())
	if !strings.Contains(s.logs.String(), `"docs":"`+s.url+`/docs"`) {
		t.Errorf("the listening line does not give the reference's URL:\n%s", s.logs)
	}
	noRedirects := apitest.Served(t, &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, s.url)
	get := func(path, accept string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", s.url+path, nil)
		req.Header.Set("Accept", accept)
		resp, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := get("/", "*/*") // curl's
	want := fmt.Sprintf(`{"name":"Plant Store API","docs":"%s/docs","openapi":"%s/openapi.json"}`, s.url, s.url)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || body != want {
		t.Errorf("GET / for a program: %d %s %s; want %s", resp.StatusCode, resp.Header.Get("Content-Type"), body, want)
	}
	resp, body = get("/", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8") // a browser's
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, `<a href="`+s.url+`/docs">`) || !strings.Contains(body, `<a href="`+s.url+`/openapi.json">`) {
		t.Errorf("GET / for a browser: %d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	resp, body = get("/docs/", "text/html")
	if resp.StatusCode != 301 || resp.Header.Get("Location") != s.url+"/docs" || !strings.Contains(body, `"error":301`) {
		t.Errorf("GET /docs/: %d Location %q %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	if resp, _ := get("/nothing-here", "*/*"); resp.StatusCode != 404 {
		t.Errorf("GET /nothing-here: %d, want 404 (only / itself answers)", resp.StatusCode)
	}
}

// A mistake on the command line is said once, in one line, with a hint
// where to look and, for a near miss, what was meant; help lists only the
// command's own flags.
func TestCommandLineMistakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want []string // the two lines of stderr
	}{
		{[]string{"tokn", "list"}, []string{`plantstore: unknown command "tokn" (did you mean token?)`, `Run "plantstore --help" for the commands.`}},
		{[]string{"frobnicate"}, []string{`plantstore: unknown command "frobnicate"`, `Run "plantstore --help" for the commands.`}},
		{[]string{"token", "lsit"}, []string{`plantstore: unknown token subcommand "lsit" (did you mean list?); want create, list or revoke`, `Run "plantstore token --help" for its usage.`}},
		{[]string{"plants", "lst"}, []string{`plantstore: unknown plants subcommand "lst" (did you mean list?); want add, delete, get, list or update`, `Run "plantstore plants --help" for its usage.`}},
		{[]string{"token", "list", "--al"}, []string{`plantstore: token list: unknown flag --al (did you mean --all?)`, `Run "plantstore token list --help" for its usage.`}},
		{[]string{"serve", "--adr", "127.0.0.1:0"}, []string{`plantstore: serve: unknown flag --adr (did you mean --addr?)`, `Run "plantstore serve --help" for its usage.`}},
		{[]string{"token", "create", "--name"}, []string{`plantstore: token create: flag needs an argument: --name`, `Run "plantstore token create --help" for its usage.`}},
	} {
		r := cli(t, dir, nil, tc.args...)
		if got := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); r.exit != 2 || r.stdout != "" || !slices.Equal(got, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and:\n%s", tc.args, r.exit, r.stdout, r.stderr, strings.Join(tc.want, "\n"))
		}
	}
	r := cli(t, dir, nil, "token", "create", "--help")
	flags := helpFlagNames(r.stdout)
	if r.exit != 0 || !slices.Equal(flags, []string{"busy-timeout", "db", "name", "replace", "scope"}) {
		t.Errorf("token create --help lists %q:\n%s", flags, r.stdout)
	}
	if !strings.Contains(r.stdout, "  --name NAME\n") || !strings.Contains(r.stdout, "(env PLANTSTORE_DB)") || strings.Contains(r.stdout, "PLANTSTORE_NAME") {
		t.Errorf("token create --help:\n%s", r.stdout)
	}
}

// --max-header-bytes is exact: a request whose line and fields come to
// the limit is served, one byte more is 431 with the Error body. Go's
// server alone would take up to 4 KiB more.
func TestHeaderLimitIsExact(t *testing.T) {
	s := serve(t, t.TempDir(), "--max-header-bytes", "2048")
	addr := strings.TrimPrefix(s.url, "http://")
	sendWith := func(size int, field, body string) (int, string) {
		t.Helper()
		head := "GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\n" + field + "X-Pad: "
		pad := size - len(head) - len("\r\n\r\n")
		req := head + strings.Repeat("p", pad) + "\r\n\r\n"
		if len(req) != size {
			t.Fatalf("built %d bytes, want %d", len(req), size)
		}
		req += body
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, req)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	send := func(size int) (int, string) { return sendWith(size, "", "") }
	if status, body := send(2048); status != 200 {
		t.Errorf("2048 bytes of header with --max-header-bytes 2048: %d %s", status, body)
	}
	for _, size := range []int{2049, 2048 + 3000} {
		if status, body := send(size); status != 431 || !strings.HasPrefix(body, `{"error":431,"message":"the request's header fields are too large`) {
			t.Errorf("%d bytes of header with --max-header-bytes 2048: %d %s", size, status, body)
		}
	}
	// A chunked request's Transfer-Encoding, which net/http takes out of
	// the header fields, counts too.
	chunked := "Transfer-Encoding: chunked\r\n"
	if status, body := sendWith(2048, chunked, "0\r\n\r\n"); status != 200 {
		t.Errorf("2048 bytes of header, chunked: %d %s", status, body)
	}
	if status, body := sendWith(2049, chunked, "0\r\n\r\n"); status != 431 || !strings.Contains(body, "2049 bytes") {
		t.Errorf("2049 bytes of header, chunked: %d %s", status, body)
	}
	// HTTP/1.0 without Host: counted as sent, not with the address its
	// links are given.
	head10 := "GET /healthz HTTP/1.0\r\nX-Pad: "
	req10 := head10 + strings.Repeat("p", 2048-len(head10)-len("\r\n\r\n")) + "\r\n\r\n"
	if conn, err := net.Dial("tcp", addr); err != nil {
		t.Fatal(err)
	} else {
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, req10)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("2048 bytes of an HTTP/1.0 head without Host: %v, %v", resp, err)
		}
		conn.Close()
	}
	// The case: 19,000 bytes against the default 16 KiB.
	d := serve(t, t.TempDir())
	addr = strings.TrimPrefix(d.url, "http://")
	if status, body := send(19000); status != 431 {
		t.Errorf("19,000 bytes of header with the default limit: %d %s", status, body)
	}
	if status, body := send(16 << 10); status != 200 {
		t.Errorf("16 KiB of header with the default limit: %d %s", status, body)
	}
}

// logged waits up to timeout for s's log to hold substr: log lines are
// written in batches.
func (s *server) logged(substr string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(s.logs.String(), substr) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// A token or a signing secret that could not be written out is not left
// behind, active and unseen: token create and webhook add undo what they
// made, say so, and exit 1.
func TestSecretThatCannotBePrintedIsUndone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mustToken(t, dir, "--name", "first") // the store exists
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "create", "--name", "lost"}, "so it was revoked at once"},
		{[]string{"webhook", "add", "https://example.org/hook"}, "so the subscriber was removed at once"},
		// --replace shows the new token before it revokes the old: the
		// old one is kept, and works.
		{[]string{"token", "create", "--name", "first", "--replace"}, `so nothing was changed: the token "first" still works`},
	} {
		if r := cliOutputFull(t, dir, nil, c.args...); r.exit != 1 || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "no space left on device") {
			t.Errorf("%q with its output on /dev/full: exit %d; stderr:\n%s", c.args, r.exit, r.stderr)
		}
		// A pipe whose reader is gone: EPIPE, not death by SIGPIPE
		// before the undoing.
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		pr.Close()
		r := cliOutputTo(t, pw, dir, nil, c.args...)
		pw.Close()
		if r.exit != 1 || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "broken pipe") {
			t.Errorf("%q with its output on a pipe no one reads: exit %d; stderr:\n%s", c.args, r.exit, r.stderr)
		}
		// Closed, or /dev/null: refused before anything is made.
		if r := cliOutputTo(t, nil, dir, nil, c.args...); r.exit != 1 || !strings.Contains(r.stderr, "nothing was made") {
			t.Errorf("%q with its output on /dev/null: exit %d; stderr:\n%s", c.args, r.exit, r.stderr)
		}
	}
	if r := cli(t, dir, nil, "token", "list"); r.exit != 0 || strings.Contains(r.stdout, "lost") || !strings.Contains(r.stdout, "first") {
		t.Errorf("token list after tokens that could not be printed: %+v", r)
	}
	// Two made and revoked (/dev/full, the pipe); none for /dev/null.
	// The replaced token never revoked: one "first", active.
	if r := cli(t, dir, nil, "token", "list", "--all"); r.exit != 0 || strings.Count(r.stdout, "lost") != 2 || strings.Count(r.stdout, "first") != 1 {
		t.Errorf("token list after a token that could not be printed: %+v", r)
	}
	if r := cli(t, dir, nil, "webhook", "list"); r.exit != 0 || strings.Contains(r.stdout, "example.org") {
		t.Errorf("webhook list after a secret that could not be printed: %+v", r)
	}
}
