package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
)

// The README's examples are run as a new user runs them, and what each
// command prints must hold the lines the README shows under it. The
// quick start is followed twice in a row in one directory, as a user
// trying it again would: both times the token works and the create
// answers 200. .ci/run runs these with PLANTSTORE_TEST_EXAMPLES=1, which
// makes a missing curl or openssl a failure instead of a skip.
// The examples of docs/api.md, docs/cli.md and docs/http.md follow the
// README's, on its servers and with its token.
func TestREADMEExamples(t *testing.T) {
	runExamples(t, 2, "../../README.md", "../../docs/api.md", "../../docs/cli.md", "../../docs/http.md")
}

// The TLS recipe: a certificate made with openssl, serve, curl, the
// command line and the health check.
func TestTLSRecipe(t *testing.T) {
	runExamples(t, 1, "../../docs/tls.md")
}

// An example is a command in a ```sh block of a document (indented too,
// as in a list item), with the lines that follow it as "# ..."
// comments: what it prints. Only blocks with
// at least one such line run; the others are synopses or need what a
// test has not (docker, a PostgreSQL server). In expected lines, "…"
// stands for any text, and a trailing "(on stderr)" or "(on stderr,
// exit status N)" is a note to the reader; a command exits 0 unless its
// note says otherwise. Comment lines after a blank line, or at the top
// of a block, are prose.
type example struct {
	command  string
	expected []string
	exit     int
	file     string
	line     int // in file, for messages
}

var exitNote = regexp.MustCompile(`\s{2,}\(on stderr(?:, exit status (\d+))?\)$`)

func parseExamples(t *testing.T, doc string) []example {
	t.Helper()
	var (
		examples []example
		inBlock  bool
		runnable bool
		block    []example
		current  *example
		cont     bool
		indent   string // of the block's fence, as in a list item
	)
	for i, line := range strings.Split(doc, "\n") {
		if inBlock {
			line = strings.TrimPrefix(line, indent)
		}
		switch {
		case !inBlock && strings.HasPrefix(strings.TrimLeft(line, " "), "```sh"):
			inBlock, runnable, block, current, cont = true, false, nil, nil, false
			indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
			continue
		case inBlock && strings.HasPrefix(line, "```"):
			if runnable {
				examples = append(examples, block...)
			}
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		switch {
		case cont:
			current.command += "\n" + line
			cont = strings.HasSuffix(line, `\`)
		case strings.TrimSpace(line) == "":
			current = nil
		case strings.HasPrefix(line, "#"):
			if current == nil {
				continue // prose
			}
			want := strings.TrimPrefix(strings.TrimPrefix(line, "#"), " ")
			if m := exitNote.FindStringSubmatch(want); m != nil {
				want = want[:len(want)-len(m[0])]
				if m[1] != "" {
					current.exit, _ = strconv.Atoi(m[1])
				}
			}
			current.expected = append(current.expected, strings.TrimRight(want, " "))
			runnable = true
		default:
			block = append(block, example{command: line, line: i + 1})
			current = &block[len(block)-1]
			cont = strings.HasSuffix(line, `\`)
		}
	}
	if len(examples) == 0 {
		t.Fatal("no examples found")
	}
	return examples
}

func runExamples(t *testing.T, passes int, files ...string) {
	for _, tool := range []string{"curl", "openssl", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("PLANTSTORE_TEST_EXAMPLES") != "" {
				t.Fatalf("PLANTSTORE_TEST_EXAMPLES is set but %s is not installed", tool)
			}
			t.Skipf("%s is not installed; set PLANTSTORE_TEST_EXAMPLES=1 to require it (CI does)", tool)
		}
	}
	// The examples talk to 127.0.0.1:8080 (and the README's second server,
	// with CORS, to 127.0.0.1:8081); here, to free ports instead, in what
	// they run and what they expect alike.
	port, second := freePort(t), freePort(t)
	ports := strings.NewReplacer("127.0.0.1:8080", "127.0.0.1:"+port, "127.0.0.1:8081", "127.0.0.1:"+second)
	var examples []example
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range parseExamples(t, ports.Replace(string(b))) {
			ex.file = filepath.Base(file)
			examples = append(examples, ex)
		}
	}

	// The built binary stands for "go run ./cmd/plantstore" and for
	// "./plantstore" (which "go build -o plantstore ./cmd/plantstore"
	// would make).
	bin := t.TempDir()
	if err := os.Symlink(binary, filepath.Join(bin, "plantstore")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + os.TempDir(),
		"PLANTSTORE_ADDR=127.0.0.1:" + port, "PLANTSTORE_SERVER=http://127.0.0.1:" + port}
	for pass := 1; pass <= passes; pass++ {
		t.Run(fmt.Sprintf("pass %d", pass), func(t *testing.T) {
			runPass(t, dir, env, examples)
		})
	}
}

func runPass(t *testing.T, dir string, env []string, examples []example) {
	var script strings.Builder
	script.WriteString("servers=\nstop() { [ -n \"$servers\" ] && { kill $servers; wait $servers; }; }\ntrap stop EXIT\n")
	for i, ex := range examples {
		command := strings.NewReplacer("go run ./cmd/plantstore", "plantstore", "./plantstore", "plantstore").Replace(ex.command)
		if strings.HasPrefix(command, "go build -o plantstore ./cmd/plantstore") {
			command = ":"
		}
		fmt.Fprintf(&script, "printf '\\n@@%d@@\\n'; printf '\\n@@%d@@\\n' >&2\n", i, i)
		if regexp.MustCompile(`^(\w+=\S+ )*plantstore serve\b`).MatchString(command) {
			// A server runs beside the rest, as in a second terminal; the
			// next command starts once it listens.
			// The log is emptied here, not by the background job's
			// redirection, which may run after the wait below has read
			// the last pass's "listening" from it (CI saw the examples
			// run on before the second pass's server listened).
			log := fmt.Sprintf("serve-%d.log", i)
			fmt.Fprintf(&script, ": >%s\n%s >>%s 2>&1 &\nservers=\"$servers $!\"\n", log, command, log)
			fmt.Fprintf(&script, "for i in $(seq 600); do grep -q '\"msg\":\"listening\"' %s && break; sleep 0.1; done\ncat %s\n", log, log)
			// A server that never listened fails its example, with its log.
			fmt.Fprintf(&script, "grep -q '\"msg\":\"listening\"' %s\nprintf '\\n@@exit %d %%d@@\\n' $?\n", log, i)
			continue
		}
		fmt.Fprintf(&script, "%s\nprintf '\\n@@exit %d %%d@@\\n' $?\n", command, i)
	}
	cmd := exec.Command("bash", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the examples' script: %v", err)
		}
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the examples did not finish within 3 minutes\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	outs, errs := splitOutput(stdout.String()), splitOutput(stderr.String())
	for i, ex := range examples {
		out := outs[strconv.Itoa(i)] + errs[strconv.Itoa(i)]
		m := regexp.MustCompile(fmt.Sprintf(`@@exit %d (\d+)@@`, i)).FindStringSubmatch(stdout.String())
		if m == nil {
			t.Errorf("%s:%d: %s: did not run", ex.file, ex.line, ex.command)
			continue
		}
		if code, _ := strconv.Atoi(m[1]); code != ex.exit {
			t.Errorf("%s:%d: %s: exit status %d, want %d\n%s", ex.file, ex.line, ex.command, code, ex.exit, out)
		}
		if missing := missingLines(out, ex.expected); missing != "" {
			t.Errorf("%s:%d: %s\nprinted:\n%s\nwhich lacks, in order from there:\n%s", ex.file, ex.line, ex.command, out, missing)
		}
	}
}

// splitOutput cuts a stream at the @@N@@ markers, by N.
func splitOutput(s string) map[string]string {
	parts := map[string]string{}
	marker := regexp.MustCompile(`(?m)^@@(\d+)@@$`)
	idx := marker.FindAllStringSubmatchIndex(s, -1)
	for k, m := range idx {
		end := len(s)
		if k+1 < len(idx) {
			end = idx[k+1][0]
		}
		text := s[m[1]:end]
		text = regexp.MustCompile(`(?m)^@@exit \d+ \d+@@$`).ReplaceAllString(text, "")
		parts[s[m[2]:m[3]]] = strings.ReplaceAll(text, "\r", "")
	}
	return parts
}

// missingLines returns the expected lines, from the first that out does
// not hold in order, or "" when it holds them all. "…" matches any text.
func missingLines(out string, expected []string) string {
	lines := strings.Split(out, "\n")
	at := 0
	for k, want := range expected {
		pattern := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(want), "…", ".*") + "$")
		found := false
		for ; at < len(lines); at++ {
			if pattern.MatchString(strings.TrimRight(lines[at], " ")) {
				found = true
				at++
				break
			}
		}
		if !found {
			return strings.Join(expected[k:], "\n")
		}
	}
	return ""
}

// freePort returns a port that nothing listens on, for a program that
// takes its port as an argument. It is picked below the kernel's
// ephemeral range (32768 and up on Linux), where outgoing connections
// take their local ports: a port from there, free when checked, can be
// taken by any parallel test's client connection before the program
// binds it. Ports already handed out are not handed out again.
func freePort(t *testing.T) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := strconv.Itoa(20000 + rand.IntN(12000))
		if portsGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			continue
		}
		ln.Close()
		portsGiven[port] = true
		return port
	}
	t.Fatal("no free port in 20000-31999")
	return ""
}

var (
	portsMu    sync.Mutex
	portsGiven = map[string]bool{}
)

// Every relative link of the README and of docs/ leads to a file that
// exists, and its #anchor, if any, to a heading of that file, as GitHub
// makes anchors of headings. The README is the front door: at most 300
// lines.
func TestDocsLinks(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(string(b), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s: link %s: %v", file, target, err)
					continue
				}
			}
			if anchor != "" && !slices.Contains(anchors(t, resolved), anchor) {
				t.Errorf("%s: link %s: %s has no heading with the anchor #%s", file, target, resolved, anchor)
			}
		}
	}
	b, _ := os.ReadFile("../../README.md")
	if n := strings.Count(string(b), "\n"); n > 300 {
		t.Errorf("README.md has %d lines; the front door holds at most 300: move the reference into docs/", n)
	}
}

// anchors are the anchors GitHub gives the headings of a Markdown file:
// lower case, punctuation dropped, spaces made hyphens, repeats numbered.
func anchors(t *testing.T, file string) []string {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(string(b), "")
	seen := map[string]int{}
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} (.+)$`).FindAllStringSubmatch(text, -1) {
		slug := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, strings.TrimSpace(m[1]))
		if n := seen[slug]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", slug, n))
		} else {
			out = append(out, slug)
		}
		seen[slug]++
	}
	return out
}

// docs/cli.md shows the commands as plantstore --help lists them.
func TestCLIDocShowsTheHelp(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for line := range strings.Lines(usage) {
		if cmd, ok := strings.CutPrefix(line, "  plantstore "); ok {
			want = append(want, "plantstore "+cmd)
		}
	}
	if doc := string(b); !strings.Contains(doc, "```\n"+strings.Join(want, "")+"```\n") {
		t.Errorf("docs/cli.md does not show the commands as plantstore --help lists them:\n%s", strings.Join(want, ""))
	}
}
