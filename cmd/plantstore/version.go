package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at link time by deploy/build.sh, with
// -ldflags "-X main.version=1.2.0 -X main.commit=HASH -X main.date=TIME".
// A build in a git checkout needs no commit: Go records the revision, its
// time and whether the tree had changes (vcs.* in the build information),
// and those win, being facts about the source compiled. commit is the
// fallback for builds without the repository's history (a source archive,
// a container build context without .git); date is the only way to know
// when the binary was built, since Go records no build time.
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// about is what "plantstore version" reports.
type about struct {
	Version    string `json:"version"`
	Commit     string `json:"commit,omitempty"`      // full revision; empty when unknown
	Modified   bool   `json:"modified"`              // built from a tree with uncommitted changes
	CommitTime string `json:"commit_time,omitempty"` // RFC 3339, from the VCS
	BuildTime  string `json:"build_time,omitempty"`  // RFC 3339, from -X main.date
	Go         string `json:"go"`
	Platform   string `json:"platform"`
}

// newAbout combines the build information Go embedded (nil when there is
// none) with the values set at link time.
func newAbout(bi *debug.BuildInfo, version, commit, date string) about {
	a := about{
		Version:   version,
		Commit:    commit,
		BuildTime: date,
		Go:        runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi == nil {
		return a
	}
	// "go install ...@v1.2.0" and a build at a tagged commit record the
	// version as the module's; elsewhere it is a pseudo-version naming the
	// commit, or "(devel)".
	if a.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		a.Version = bi.Main.Version
	}
	var revision string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			a.CommitTime = s.Value
		case "vcs.modified":
			a.Modified = s.Value == "true"
		}
	}
	if revision != "" {
		a.Commit = revision
	} else {
		// Whatever time or state came without a revision describes no
		// commit we can name.
		a.CommitTime, a.Modified = "", false
	}
	return a
}

// String is the one line "plantstore version" prints:
// plantstore 1.2.0 (commit f7a126143a70+dirty, committed ..., built ..., go1.26.8 linux/amd64).
func (a about) String() string {
	c := "unknown"
	if a.Commit != "" {
		c = a.Commit
		if len(c) > 12 && isHex(c) {
			c = c[:12]
		}
		if a.Modified {
			c += "+dirty"
		}
	}
	parts := []string{"commit " + c}
	if a.CommitTime != "" {
		parts = append(parts, "committed "+a.CommitTime)
	}
	if a.BuildTime != "" {
		parts = append(parts, "built "+a.BuildTime)
	}
	parts = append(parts, a.Go+" "+a.Platform)
	return fmt.Sprintf("plantstore %s (%s)", a.Version, strings.Join(parts, ", "))
}

func isHex(s string) bool {
	return strings.Trim(s, "0123456789abcdef") == ""
}

func runVersion(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", `version [--json]

Prints the version, the commit it was built from (+dirty when the tree
had uncommitted changes), when that commit was made and when the binary
was built, and the Go release and platform.`, getenv, stdout, stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if rest, err := fs.parse(args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError(fmt.Sprintf("version takes no arguments, got %q", rest))
	}
	bi, _ := debug.ReadBuildInfo()
	a := newAbout(bi, version, commit, date)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(a)
	}
	_, err := fmt.Fprintln(stdout, a)
	return err
}
