package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestPlantsCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := serve(t, dir)
	c := &plantsCLI{dir: dir, url: s.url, token: mustToken(t, dir, "--name", "cli")}
	// In order: each phase works on what the one before left.
	t.Run("add", c.add)
	t.Run("list", c.list)
	t.Run("get and update", c.getAndUpdate)
	t.Run("negative ids", c.negativeIDs)
	t.Run("errors", c.errors)
}

// plantsCLI runs "plantstore plants" against one server with one token.
type plantsCLI struct{ dir, url, token string }

func (c *plantsCLI) plants(t *testing.T, args ...string) result {
	t.Helper()
	env := []string{"PLANTSTORE_SERVER=" + c.url, "PLANTSTORE_TOKEN=" + c.token}
	return cli(t, c.dir, env, append([]string{"plants"}, args...)...)
}

// tableRows checks that r succeeded and printed the table of rows.
func tableRows(t *testing.T, r result, rows ...string) {
	t.Helper()
	if r.exit != 0 {
		t.Fatalf("exit %d: %s", r.exit, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if want := append([]string{`ID\s+NAME\s+TAG`}, rows...); len(lines) != len(want) {
		t.Fatalf("table %q, want rows %q", r.stdout, rows)
	} else {
		for i, w := range want {
			if !regexp.MustCompile(`^` + w + `\s*$`).MatchString(lines[i]) {
				t.Errorf("row %d %q, want %q", i, lines[i], w)
			}
		}
	}
}

// taggedRow checks the table of get and update, which show the plant's
// ETag too, and returns the ETag.
func taggedRow(t *testing.T, r result, row string) string {
	t.Helper()
	if r.exit != 0 {
		t.Fatalf("exit %d: %s", r.exit, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	m := regexp.MustCompile(`^` + row + `\s+("[A-Za-z0-9_-]{22}")\s*$`).FindStringSubmatch(lines[len(lines)-1])
	if len(lines) != 2 || !regexp.MustCompile(`^ID\s+NAME\s+TAG\s+ETAG\s*$`).MatchString(lines[0]) || m == nil {
		t.Fatalf("table %q, want a row %q with its ETag", r.stdout, row)
	}
	return m[1]
}

func (c *plantsCLI) add(t *testing.T) {
	tableRows(t, c.plants(t, "add", "--id", "7", "--name", "Fern", "--tag", "indoor"), `7\s+Fern\s+indoor`)
	tableRows(t, c.plants(t, "add", "--id", "3", "--name", "Aloe vera"), `3\s+Aloe vera\s+-`)
	tableRows(t, c.plants(t, "add", "--id", "7", "--name", "Fern", "--tag", "indoor"), `7\s+Fern\s+indoor`) // replay
	r := c.plants(t, "add", "--id", "9", "--name", "Cactus", "--json")
	var added map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &added); err != nil || added["id"] != 9.0 || added["name"] != "Cactus" {
		t.Errorf("add --json: %q %v", r.stdout, err)
	}
	if _, ok := added["tag"]; ok {
		t.Errorf("a plant without a tag printed one: %q", r.stdout)
	}
}

func (c *plantsCLI) list(t *testing.T) {
	r := c.plants(t, "list", "--limit", "2")
	tableRows(t, r, `3\s+Aloe vera\s+-`, `7\s+Fern\s+indoor`)
	if !strings.Contains(r.stderr, "--after 7") {
		t.Errorf("no hint about the next page: %q", r.stderr)
	}
	tableRows(t, c.plants(t, "list", "--limit", "2", "--after", "7"), `9\s+Cactus\s+-`)
	tableRows(t, c.plants(t, "list", "--all", "--limit", "1"), `3\s+Aloe vera\s+-`, `7\s+Fern\s+indoor`, `9\s+Cactus\s+-`)
	tableRows(t, c.plants(t, "list", "--tag", "indoor"), `7\s+Fern\s+indoor`)
	r = c.plants(t, "list", "--json", "--tag", "none")
	if r.exit != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("an empty list as JSON: %q", r.stdout)
	}
	r = c.plants(t, "list", "--all", "--json")
	var listed []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 3 {
		t.Errorf("list --all --json: %q %v", r.stdout, err)
	}
}

func (c *plantsCLI) getAndUpdate(t *testing.T) {
	etag := taggedRow(t, c.plants(t, "get", "7"), `7\s+Fern\s+indoor`)
	newTag := taggedRow(t, c.plants(t, "update", "7", "--name", "Boston fern", "--tag", "hanging", "--if-match", etag), `7\s+Boston fern\s+hanging`)
	if r := c.plants(t, "update", "7", "--name", "lost update", "--if-match", etag); r.exit != 1 || !strings.Contains(r.stderr, "(HTTP 412)") {
		t.Errorf("update with a stale --if-match: %+v", r)
	}
	if r := c.plants(t, "delete", "7", "--if-match", etag); r.exit != 1 || !strings.Contains(r.stderr, "(HTTP 412)") {
		t.Errorf("delete with a stale --if-match: %+v", r)
	}
	// An ETag whose quotes the shell took off ("--if-match "x"" passes x)
	// is the same ETag.
	newTag = taggedRow(t, c.plants(t, "update", "7", "--name", "Boston fern", "--tag", "hanging", "--if-match", strings.Trim(newTag, `"`)), `7\s+Boston fern\s+hanging`)
	r := c.plants(t, "get", "7", "--json")
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got["etag"] != newTag || got["name"] != "Boston fern" {
		t.Errorf("get --json: %q %v, want the etag %s", r.stdout, err, newTag)
	}
	// Only what is given changes.
	taggedRow(t, c.plants(t, "update", "7", "--name", "Fern"), `7\s+Fern\s+hanging`)
	taggedRow(t, c.plants(t, "update", "7", "--tag", "shade"), `7\s+Fern\s+shade`)
	taggedRow(t, c.plants(t, "update", "7", "--no-tag"), `7\s+Fern\s+-`)
	taggedRow(t, c.plants(t, "update", "7", "--tag", ""), `7\s+Fern\s+""`)
	taggedRow(t, c.plants(t, "update", "7", "--name", "Boston fern", "--no-tag"), `7\s+Boston fern\s+-`)
	etag = taggedRow(t, c.plants(t, "get", "7"), `7\s+Boston fern\s+-`)
	taggedRow(t, c.plants(t, "update", "7", "--tag", "hanging", "--if-match", etag), `7\s+Boston fern\s+hanging`)
	if r := c.plants(t, "update", "7", "--tag", "lost", "--if-match", etag); r.exit != 1 || !strings.Contains(r.stderr, "(HTTP 412)") {
		t.Errorf("update --tag with a stale --if-match: %+v", r)
	}
	if r := c.plants(t, "delete", "7"); r.exit != 0 || r.stdout != "" {
		t.Errorf("delete: %+v", r)
	}
}

func (c *plantsCLI) negativeIDs(t *testing.T) {
	// Negative ids are ids, not flags.
	tableRows(t, c.plants(t, "add", "--id", "-5", "--name", "Negative"), `-5\s+Negative\s+-`)
	taggedRow(t, c.plants(t, "get", "-5", "--json=false"), `-5\s+Negative\s+-`)
	taggedRow(t, c.plants(t, "update", "--name", "Still negative", "-5"), `-5\s+Still negative\s+-`)
	tableRows(t, c.plants(t, "list", "--after", "-6", "--limit", "1"), `-5\s+Still negative\s+-`)
	if r := c.plants(t, "delete", "-5"); r.exit != 0 {
		t.Errorf("delete -5: %+v", r)
	}
	// The token is never shown, not even as a flag's default.
	if r := c.plants(t, "get", "--help"); strings.Contains(r.stdout+r.stderr, c.token) {
		t.Error("--help shows the token from PLANTSTORE_TOKEN")
	}
	if r := c.plants(t, "get", "--bogus"); strings.Contains(r.stdout+r.stderr, c.token) {
		t.Error("a usage error shows the token from PLANTSTORE_TOKEN")
	}
}

func (c *plantsCLI) errors(t *testing.T) {
	// Errors: the server's message on stderr, a non-zero exit, nothing on stdout.
	for _, tc := range []struct {
		args []string
		exit int
		msg  string
	}{
		{[]string{"get", "7"}, 1, "plant 7 not found (HTTP 404)"},
		{[]string{"delete", "7"}, 1, "not found"},
		{[]string{"update", "7", "--name", "x"}, 1, "not found"},
		{[]string{"update", "7", "--tag", "x"}, 1, "not found"},
		{[]string{"update", "3"}, 2, "needs --name, --tag or --no-tag"},
		{[]string{"update", "3", "--tag", "x", "--no-tag"}, 2, "not both"},
		{[]string{"update", "3", "--name", ""}, 2, "--name: empty"},
		{[]string{"get", "3", "--ca-cert", "/nonexistent.pem"}, 2, "--ca-cert"},
		{[]string{"add", "--id", "3", "--name", "Other"}, 1, "already exists with other content (HTTP 409)"},
		{[]string{"add", "--id", "4", "--name", strings.Repeat("n", 201)}, 1, "name: must be 1 to 200 characters"},
		{[]string{"list", "--limit", "5000"}, 2, "--limit 5000: want 1 to 1000"},
		{[]string{"list", "--limit", "-1"}, 2, "--limit -1: want 1 to 1000"},
		{[]string{"list", "--server", "http://127.0.0.1:1"}, 1, "cannot reach the server"},
		{[]string{"list", "--token", "pst_nope"}, 1, "malformed (HTTP 401)"},
		{[]string{"get"}, 2, "exactly one argument"},
		{[]string{"get", "seven"}, 2, "want an integer"},
		{[]string{"get", "99999999999999999999"}, 2, "out of range: a plant id is an int64"},
		{[]string{"add", "--id", "9223372036854775808", "--name", "x"}, 2, "out of range: a plant id is an int64"},
		{[]string{"add", "--name", "x"}, 2, "plants add needs --id"},
		{[]string{"add", "--id", "", "--name", "x"}, 2, "--id: empty; want an integer"},
		{[]string{"add", "--id", "1"}, 2, "needs --name"},
		{[]string{"add", "--id", "1", "--name", ""}, 2, "--name: empty"},
		{[]string{"frobnicate"}, 2, "unknown plants subcommand"},
	} {
		r := c.plants(t, tc.args...)
		if r.exit != tc.exit || !strings.Contains(r.stderr, tc.msg) || r.stdout != "" {
			t.Errorf("plants %q: exit %d, stderr %q, stdout %q; want exit %d and %q", tc.args, r.exit, r.stderr, r.stdout, tc.exit, tc.msg)
		}
	}
	if r := cli(t, c.dir, []string{"PLANTSTORE_SERVER=" + c.url}, "plants", "list"); r.exit != 2 || !strings.Contains(r.stderr, "no token") {
		t.Errorf("no token: %+v", r)
	}
	// A newline read from a file with the token: said, not sent.
	if r := cli(t, c.dir, []string{"PLANTSTORE_SERVER=" + c.url, "PLANTSTORE_TOKEN=" + c.token + "\n"}, "plants", "list"); r.exit != 2 || !strings.Contains(r.stderr, "--token (PLANTSTORE_TOKEN): unusable token: it has a control character at byte") || strings.Contains(r.stderr, c.token) {
		t.Errorf("a token with a newline: %+v", r)
	}
	// --token and --server on the command line win over the environment.
	r := cli(t, c.dir, []string{"PLANTSTORE_SERVER=http://127.0.0.1:1", "PLANTSTORE_TOKEN=x"}, "plants", "get", "3", "--server", c.url, "--token", c.token)
	taggedRow(t, r, `3\s+Aloe vera\s+-`)
}

// Every command explains itself and its flags, and asking is not an error.
func TestHelp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := cli(t, dir, nil, "--help")
	if r.exit != 0 {
		t.Fatalf("--help: exit %d", r.exit)
	}
	for _, cmd := range []string{"serve", "token create", "token list", "token revoke", "plants add", "plants list", "plants get", "plants update", "plants delete"} {
		if !strings.Contains(r.stdout, "plantstore "+cmd) {
			t.Errorf("--help does not mention %q", cmd)
		}
	}
	for _, tc := range []struct {
		args  []string
		flags []string
	}{
		{[]string{"serve"}, []string{"-addr", "-db", "-max-body-bytes", "-read-header-timeout", "-request-timeout", "-shutdown-timeout", "-log-format", "PLANTSTORE_ADDR"}},
		{[]string{"token", "create"}, []string{"-name", "-scope", "-db"}},
		{[]string{"token", "list"}, []string{"-all", "-db"}},
		{[]string{"token", "revoke"}, []string{"-db"}},
		{[]string{"token"}, []string{"create", "list", "revoke"}},
		{[]string{"plants"}, []string{"add", "list", "get", "update", "delete"}},
		{[]string{"plants", "add"}, []string{"-id", "-name", "-tag", "-server", "-token", "-json", "PLANTSTORE_TOKEN"}},
		{[]string{"plants", "list"}, []string{"-tag", "-limit", "-after", "-all", "-json"}},
		{[]string{"plants", "get"}, []string{"-server", "-token"}},
		{[]string{"plants", "update"}, []string{"-name", "-tag", "-no-tag", "-ca-cert", "PLANTSTORE_CA_CERT"}},
		{[]string{"plants", "delete"}, []string{"-server"}},
		{[]string{"events"}, []string{"-after", "-type", "-follow", "-json"}},
		{[]string{"webhook", "add"}, []string{"URL [--events TYPES] [--db PATH]", "--events TYPES"}},
		{[]string{"webhook", "list"}, []string{"-json", "-full-urls"}},
		{[]string{"backup"}, []string{"-to", "-db"}},
	} {
		r := cli(t, dir, nil, append(tc.args, "--help")...)
		if r.exit != 0 {
			t.Errorf("%q --help: exit %d, stderr %q", tc.args, r.exit, r.stderr)
		}
		for _, f := range tc.flags {
			if !strings.Contains(r.stdout, f) {
				t.Errorf("%q --help does not explain %s:\n%s", tc.args, f, r.stdout)
			}
		}
		// One synopsis, one list of flags, when there are flags.
		if strings.Count(r.stdout, "Usage: plantstore") != 1 || strings.Count(r.stdout, "Flags:") > 1 {
			t.Errorf("%q --help says Usage or Flags more than once:\n%s", tc.args, r.stdout)
		}
	}
	// "help COMMAND" is "COMMAND --help".
	for _, name := range []string{"serve", "token", "backup"} {
		want := cli(t, dir, nil, name, "--help")
		if r := cli(t, dir, nil, "help", name); r.exit != 0 || r.stdout != want.stdout {
			t.Errorf("help %s: exit %d, stdout:\n%s\nwant %s --help's:\n%s", name, r.exit, r.stdout, name, want.stdout)
		}
	}
}

// Every usage mistake exits 2 and ends with the command to read its usage,
// whether the flag package or the command itself found it.
func TestUsageMistakesSayWhereTheUsageIs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		hint string
		says string // in the message, when set
	}{
		{[]string{"token", "create"}, "plantstore token create --help", ""},
		{[]string{"health", "--timeout", "1"}, "plantstore health --help", "not a duration (examples: 500ms"},
		{[]string{"plants", "list", "--server", "127.0.0.1:1", "--token", "pst_x"}, "plantstore plants list --help", "--server (PLANTSTORE_SERVER): base URL \"127.0.0.1:1\" must be an absolute"},
		{[]string{"token", "revoke"}, "plantstore token revoke --help", ""},
		{[]string{"token", "create", "--al"}, "plantstore token create --help", ""},
		{[]string{"plants", "add", "--name", "x", "--token", "pst_x"}, "plantstore plants add --help", ""},
		{[]string{"backup"}, "plantstore backup --help", ""},
		{[]string{"serve", "--addr", "bogus"}, "plantstore serve --help", ""},
		{[]string{"tokn"}, "plantstore --help", ""},
		// A flag where a value should be is not taken as the value.
		{[]string{"token", "create", "--name", "--replace"}, "plantstore token create --help", ""},
		{[]string{"plants", "add", "--id", "1", "--name", "--tag", "x", "--token", "pst_x"}, "plantstore plants add --help", ""},
		// A flag given twice: the last would win, silently.
		{[]string{"token", "create", "--name", "two", "--scope", "plants:read", "--scope=plants:write"}, "plantstore token create --help", ""},
		{[]string{"plants", "add", "--id", "1", "--id", "2", "--name", "x", "--token", "pst_x"}, "plantstore plants add --help", ""},
	} {
		r := cli(t, dir, nil, tc.args...)
		if r.exit != 2 || strings.Count(r.stderr, "Run \"") != 1 || !strings.Contains(r.stderr, "Run \""+tc.hint+"\"") || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and one hint, %q, saying %q", tc.args, r.exit, r.stderr, tc.hint, tc.says)
		}
	}
	if r := cli(t, dir, nil, "token", "list"); strings.Contains(r.stdout, "--replace") || strings.Contains(r.stdout, "two") {
		t.Errorf("a token named --replace, or one with a flag given twice, was made:\n%s", r.stdout)
	}
	// Written with "=", it is the value; a negative number is a value too.
	if r := cli(t, dir, nil, "token", "create", "--name=-x"); r.exit != 0 {
		t.Errorf("token create --name=-x: %+v", r)
	}
}

// A database URL's passwords (its user's, and the client key's in
// sslpassword), given in PLANTSTORE_DB, are never shown: not as the flag's
// default in --help, nor when the database cannot be reached.
func TestDatabasePasswordIsNeverShown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := []string{"PLANTSTORE_DB=postgres://plant:sekrit-1@127.0.0.1:1/db?password=sekrit-2&sslpassword=sekrit-3&connect_timeout=1"}
	for _, args := range [][]string{{"serve", "--help"}, {"token", "list", "--help"}, {"token", "list"}} {
		r := cli(t, dir, env, args...)
		if out := r.stdout + r.stderr; strings.Contains(out, "sekrit") {
			t.Errorf("%q shows the database password:\n%s", args, out)
		}
		if args[len(args)-1] == "--help" && !strings.Contains(r.stdout, "postgres://plant:xxxxx@127.0.0.1:1/db") {
			t.Errorf("%q does not show the masked URL as the default:\n%s", args, r.stdout)
		}
	}
}

// A --db that would become a SQLite file named after a connection string,
// password and all (a libpq keyword/value string, a URL with a space or a
// line break around it, a URL whose scheme is mistyped, one whose password
// holds a bare #), is refused by every command, from the flag, the
// variable or its file, without showing the value: no store is made, no
// such name is logged, and --help does not show it as the default.
func TestDatabaseStringThatIsNoStoreIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "db-url")
	if err := os.WriteFile(file, []byte("host=127.0.0.1 user=plant password=sekrit dbname=db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	typoFile := filepath.Join(dir, "db-url-typo")
	if err := os.WriteFile(typoFile, []byte("postgress://plant:sekrit@db.internal:5432/db?sslmode=verify-full\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, env := range [][]string{
		{"PLANTSTORE_DB=host=127.0.0.1 user=plant password=sekrit dbname=db"},
		{"PLANTSTORE_DB=dbname=db password = sekrit"},
		{"PLANTSTORE_DB= postgres://plant:sekrit@127.0.0.1:1/db"},
		{"PLANTSTORE_DB=postgres://plant:sekrit@127.0.0.1:1/db\r"},
		{"PLANTSTORE_DB=./sekrit.db "},
		{"PLANTSTORE_DB_FILE=" + file},
		{"PLANTSTORE_DB=postgress://plant:sekrit@127.0.0.1:1/db"},
		{"PLANTSTORE_DB=pgsql://plant:sekrit@127.0.0.1:1/db"},
		{"PLANTSTORE_DB=postgres:/plant:sekrit@127.0.0.1:1/db"},
		{"PLANTSTORE_DB=postgres//plant:sekrit@127.0.0.1:1/db"},
		{"PLANTSTORE_DB=postgres://plant:sekrit#x@127.0.0.1:1/db"},
		{"PLANTSTORE_DB_FILE=" + typoFile},
	} {
		for _, args := range [][]string{
			{"serve", "--addr", "127.0.0.1:0"}, {"token", "create", "--name", "x"}, {"token", "list"},
			{"webhook", "list"}, {"backup", "--to", "b.db"}, {"restore", "--from", "b.db"},
		} {
			r := cli(t, dir, env, args...)
			if r.exit != 2 || strings.Contains(r.stdout+r.stderr, "sekrit") || !strings.Contains(r.stderr, "--db (PLANTSTORE_DB) ") {
				t.Errorf("%q with %q: %+v; want exit 2, a message about --db that does not show the value", args, env, r)
			}
		}
		if r := cli(t, dir, env, "serve", "--help"); strings.Contains(r.stdout, "sekrit") {
			t.Errorf("serve --help with %q shows it:\n%s", env, r.stdout)
		}
	}
	// On the command line too.
	r := cli(t, dir, nil, "token", "list", "--db", "host=db password=sekrit")
	if r.exit != 2 || strings.Contains(r.stderr, "sekrit") || !strings.Contains(r.stderr, "keyword/value") {
		t.Errorf("token list --db with a keyword/value string: %+v", r)
	}
	r = cli(t, dir, nil, "token", "list", "--db", "postgre://plant:sekrit@127.0.0.1:1/db")
	if r.exit != 2 || strings.Contains(r.stderr, "sekrit") || !strings.Contains(r.stderr, "begins postgres://") {
		t.Errorf("token list --db with a mistyped scheme: %+v", r)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "db-url" && e.Name() != "db-url-typo" {
			t.Errorf("a refused --db made %s", e.Name())
		}
	}
	// Neither a scheme in capitals, which is PostgreSQL's still, nor a
	// drive letter, which makes a path, is taken for a mistake.
	r = cli(t, dir, nil, "token", "list", "--db", "Postgres://plant:sekrit@127.0.0.1:1/db")
	if r.exit != 1 || strings.Contains(r.stderr, "sekrit") || strings.Contains(r.stderr, "invalid database URL") || strings.Contains(r.stderr, "--db (PLANTSTORE_DB)") {
		t.Errorf("token list --db with the scheme in capitals: %+v; want it tried, as PostgreSQL", r)
	}
	r = cli(t, dir, nil, "token", "list", "--db", "C:/plantstore.db")
	if r.exit != 1 || strings.Contains(r.stderr, "--db (PLANTSTORE_DB)") || !strings.Contains(r.stderr, "plantstore.db") {
		t.Errorf("token list --db C:/plantstore.db: %+v; want it taken for a path", r)
	}
}

// When the answer cannot be written out, plants says so, not that the
// server could not be reached: the server did what was asked.
func TestPlantsOutputThatCannotBeWritten(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := serve(t, dir)
	c := &plantsCLI{dir: dir, url: s.url, token: mustToken(t, dir, "--name", "cli")}
	env := []string{"PLANTSTORE_SERVER=" + c.url, "PLANTSTORE_TOKEN=" + c.token}
	r := cliOutputFull(t, dir, env, "plants", "add", "--id", "400", "--name", "full")
	if r.exit != 1 || !strings.Contains(r.stderr, "the server's answer could not be written to standard output") || strings.Contains(r.stderr, "cannot reach") {
		t.Errorf("plants add with its output on /dev/full: exit %d; stderr:\n%s", r.exit, r.stderr)
	}
	if r := c.plants(t, "get", "400"); r.exit != 0 || !strings.Contains(r.stdout, "full") {
		t.Errorf("the plant added: %+v", r)
	}
	// The events command too.
	if r := cliOutputFull(t, dir, env, "events"); r.exit != 1 || !strings.Contains(r.stderr, "could not be written to standard output") {
		t.Errorf("events with its output on /dev/full: exit %d; stderr:\n%s", r.exit, r.stderr)
	}
}

// A server certificate that does not verify is said with the server it
// came from, by every command that talks to one; for an authority not
// trusted, with the flag that trusts a private one.
func TestPlantsCertificateRefusalNamesServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token := mustToken(t, dir, "--name", "cli")
	certFile, keyFile, _ := selfSigned(t) // for 127.0.0.1 only
	s := serve(t, dir, "--tls-cert", certFile, "--tls-key", keyFile)
	_, port, _ := strings.Cut(strings.TrimPrefix(s.url, "http://"), ":")
	for _, tc := range []struct {
		name, server string
		flags        []string
		says         string
		hint         bool
	}{
		{"unknown authority", "https://127.0.0.1:" + port, nil,
			"the certificate of the server at https://127.0.0.1:" + port + " does not verify: tls: failed to verify certificate: x509: certificate signed by unknown authority", true},
		// Trusted, for another address: --ca-cert would not help.
		{"another name", "https://localhost:" + port, []string{"--ca-cert", certFile},
			"the certificate of the server at https://localhost:" + port + " does not verify: tls: failed to verify certificate: x509: ", false},
	} {
		env := []string{"PLANTSTORE_SERVER=" + tc.server, "PLANTSTORE_TOKEN=" + token}
		for _, args := range [][]string{
			{"plants", "get", "1"},
			{"plants", "add", "--id", "1", "--name", "Fern"},
			{"plants", "list"},
			{"events"},
			{"events", "--follow"},
		} {
			r := cli(t, dir, env, append(args, tc.flags...)...)
			hint := strings.HasSuffix(r.stderr, " (for a private CA, give its certificate with --ca-cert FILE)\n")
			if r.exit != 1 || !strings.HasPrefix(r.stderr, "plantstore: "+tc.says) || hint != tc.hint || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%s: %q: exit %d, stderr %q; want exit 1, one line saying %q, the --ca-cert hint %v", tc.name, args, r.exit, r.stderr, tc.says, tc.hint)
			}
		}
	}
}

// Servers that are not plantstore, or not quite: one that answers HTML
// was reached, and is said to be something else, not unreachable; a page
// with a next link and no plants is shown, without a crash. A --server
// that does not parse is named with its password masked.
func TestPlantsCLIAgainstOtherServers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html>it works</html>")
	}))
	defer html.Close()
	emptyWithNext := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Link", `</plants?after=5>; rel="next"`)
		io.WriteString(w, "[]")
	}))
	defer emptyWithNext.Close()
	run := func(server string, args ...string) result {
		return cli(t, dir, []string{"PLANTSTORE_SERVER=" + server, "PLANTSTORE_TOKEN=pst_x"}, append([]string{"plants"}, args...)...)
	}
	if r := run(html.URL, "list"); r.exit != 1 || !strings.Contains(r.stderr, "answered, but not as plantstore does") || strings.Contains(r.stderr, "cannot reach") {
		t.Errorf("plants list against an HTML server: %+v", r)
	}
	// An answer cut short (its Content-Length never reached) is a broken
	// connection, not another kind of server.
	cutShort := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, `{"name":"a"`)
	}))
	defer cutShort.Close()
	if r := run(cutShort.URL, "get", "1"); r.exit != 1 || !strings.Contains(r.stderr, "broke before the whole answer came") || strings.Contains(r.stderr, "not as plantstore does") {
		t.Errorf("plants get against a server that cuts its answer short: %+v", r)
	}
	if r := run(emptyWithNext.URL, "list"); r.exit != 0 || strings.Contains(r.stderr, "panic") {
		t.Errorf("plants list of an empty page with a next link: %+v", r)
	}
	for _, server := range []string{"http://u:sekrit@127.0.0.1:port", "http://u:sekrit@[::1",
		// From env files: a carriage return, quotes; a missing scheme.
		"http://u:sekrit@127.0.0.1:8080\r", `"http://u:sekrit@127.0.0.1:8080"`, "http://u:sekrit@127.0.0.1:8080\t",
		`http://u:"sekrit"@127.0.0.1:8080`, "u:sekrit@127.0.0.1:8080", "http:/u:sekrit@127.0.0.1:8080", "http:u:sekrit@127.0.0.1:8080"} {
		r := run(server, "list")
		if r.exit != 2 || strings.Contains(r.stdout+r.stderr, "sekrit") || !strings.Contains(r.stderr, "xxxxx@") {
			t.Errorf("plants list --server %q (does not parse): %+v", server, r)
		}
		if r := run(server, "list", "--help"); strings.Contains(r.stdout+r.stderr, "sekrit") {
			t.Errorf("plants list --help with --server %q shows the password:\n%s", server, r.stdout)
		}
	}
}
