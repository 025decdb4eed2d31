package sqlite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plantstore/plantstore/internal/apitest"
)

// A backup's SHA-256 goes beside it in sha256sum's format: sha256sum -c
// checks it, and Restore reads it.
func TestBackupWritesItsChecksum(t *testing.T) {
	db, path := openTest(t, Options{})
	fillForBackup(t, db)
	dir := t.TempDir()
	to := filepath.Join(dir, "nightly.db")
	info, err := Backup(context.Background(), path, to, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if info.Checksum != to+".sha256" {
		t.Errorf("info.Checksum = %q, want %q", info.Checksum, to+".sha256")
	}
	b, err := os.ReadFile(to)
	if err != nil {
		t.Fatal(err)
	}
	line, err := os.ReadFile(to + ".sha256")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x  nightly.db\n", sha256.Sum256(b)); string(line) != want {
		t.Errorf("the checksum file holds %q, want %q", line, want)
	}
	if st, err := os.Stat(to + ".sha256"); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the checksum file: %v, %v; want mode 0600", st, err)
	}
	if names := apitest.DirNames(t, dir); strings.Join(names, " ") != "nightly.db nightly.db.sha256" {
		t.Errorf("the backup's directory holds %q, want the backup and its checksum", names)
	}
	sha256sum, err := exec.LookPath("sha256sum")
	if err != nil {
		t.Skip("no sha256sum to check the file with")
	}
	cmd := exec.Command(sha256sum, "-c", "nightly.db.sha256")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "nightly.db: OK\n" {
		t.Errorf("sha256sum -c: %v: %s", err, out)
	}
}

// A checksum file left by a backup since removed is replaced; a directory
// where the checksum goes refuses the backup, before it writes anything.
func TestBackupBesideAnOldChecksum(t *testing.T) {
	db, path := openTest(t, Options{})
	fillForBackup(t, db)
	dir := t.TempDir()
	to := filepath.Join(dir, "b.db")
	if err := os.WriteFile(to+".sha256", []byte(strings.Repeat("0", 64)+"  b.db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Backup(context.Background(), path, to, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), to, filepath.Join(t.TempDir(), "r.db"), RestoreOptions{}); err != nil {
		t.Errorf("restore of the backup beside a replaced checksum: %v", err)
	}

	dir = t.TempDir()
	to = filepath.Join(dir, "b.db")
	if err := os.Mkdir(to+".sha256", 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Backup(context.Background(), path, to, time.Second); err == nil || !strings.Contains(err.Error(), "is a directory, where the backup's checksum file goes") {
		t.Errorf("backup with a directory for its checksum: %v", err)
	}
	if names := apitest.DirNames(t, dir); strings.Join(names, " ") != "b.db.sha256" {
		t.Errorf("a refused backup left %q", names)
	}
}

// A backup whose contents changed after its checksum was written is
// refused, and nothing changes, though its structure is whole: only the
// checksum tells. Without the checksum file it restores as it is.
func TestRestoreRefusesAChangedBackup(t *testing.T) {
	db, path := openTest(t, Options{})
	fillForBackup(t, db)
	backup := mustBackup(t, path)
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, []byte("plant 13"))
	if at < 0 {
		t.Fatal("no plant 13 in the backup's bytes")
	}
	b[at] = 'P' // a flipped bit: "Plant 13"
	if err := os.WriteFile(backup, b, 0o600); err != nil {
		t.Fatal(err)
	}

	to := filepath.Join(t.TempDir(), "restored.db")
	_, err = Restore(context.Background(), backup, to, RestoreOptions{})
	if mismatch, ok := errors.AsType[*ChecksumMismatchError](err); !ok || mismatch.ChecksumFile != backup+".sha256" {
		t.Fatalf("restore of a changed backup: %v, want a ChecksumMismatchError", err)
	}
	if !strings.Contains(err.Error(), "do not match the SHA-256 in "+backup+".sha256") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Errorf("the refusal says %q", err)
	}
	for _, name := range apitest.DirNames(t, filepath.Dir(to)) {
		t.Errorf("a refused restore left %s", name)
	}
	before := dumpRows(t, path)
	if _, err := Restore(context.Background(), backup, path, RestoreOptions{Replace: true}); err == nil {
		t.Error("restore of a changed backup with Replace succeeded")
	}
	sameRows(t, "the store a refused restore left", dumpRows(t, path), before)

	// The structure is whole: without its checksum the change restores.
	if err := os.Remove(backup + ".sha256"); err != nil {
		t.Fatal(err)
	}
	info, err := Restore(context.Background(), backup, to, RestoreOptions{})
	if err != nil {
		t.Fatalf("restore without the checksum file: %v", err)
	}
	if info.Checksum != "" {
		t.Errorf("info.Checksum = %q without a checksum file", info.Checksum)
	}
	if !strings.Contains(strings.Join(dumpRows(t, to)["plants"], "\n"), "Plant 13") {
		t.Error("the change is not in the store restored unchecked")
	}
}

// Restore reads what sha256sum writes and checks, by hand as well: a path
// in place of the name, binary mode, several files in one list, escaped
// names, --tag, comments; and refuses a file it cannot read a checksum
// for the backup from.
func TestRestoreReadsChecksumFiles(t *testing.T) {
	db, path := openTest(t, Options{})
	fillForBackup(t, db)
	backup := mustBackup(t, path)
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(b))
	other := strings.Repeat("ab", 32)
	// A backup whose name sha256sum escapes.
	odd := filepath.Join(filepath.Dir(backup), `back\up.db`)
	if err := os.WriteFile(odd, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, backup, file, wantErr string }{
		{"a path, binary mode", backup, sum + " *" + backup + "\n", ""},
		{"one line, another name", backup, sum + "  renamed.db\n", ""},
		{"one of several", backup, other + "  other.db\n" + sum + "  /elsewhere/backup.db\n", ""},
		{"CRLF, one of several", backup, other + "  other.db\r\n" + sum + "  backup.db\r\n", ""},
		{"escaped, one of several", odd, other + "  other.db\n" + `\` + sum + `  back\\up.db` + "\n", ""},
		{"--tag", backup, "SHA256 (other.db) = " + other + "\nSHA256 (backup.db) = " + sum + "\n", ""},
		{"comments and indents", backup, "# nightly\n\n  " + other + "  other.db\n\t" + sum + "  backup.db\n", ""},
		{"the path given, beside another of its name", backup, other + "  /a/backup.db\n" + sum + "  " + backup + "\n", ""},
		{"two of its name", backup, other + "  /a/backup.db\n" + sum + "  /b/backup.db\n", "names more than one file called backup.db"},
		{"several, none of it", backup, other + "  a.db\n" + sum + "  b.db\n", "names no file called backup.db"},
		{"another checksum", backup, other + "  backup.db\n", "do not match"},
		{"openssl's", backup, "SHA2-256(backup.db)= " + sum + "\n", "not in a form restore reads"},
		{"a short digest", backup, sum[:40] + "  backup.db\n", "not in a form restore reads"},
		{"a short digest, --tag", backup, "SHA256 (backup.db) = " + sum[:40] + "\n", "not in a form restore reads"},
		{"comments only", backup, "# nothing\n", "not in a form restore reads"},
		{"empty", backup, "", "not in a form restore reads"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(c.backup+".sha256", []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(c.backup + ".sha256")
			to := filepath.Join(t.TempDir(), "restored.db")
			info, err := Restore(context.Background(), c.backup, to, RestoreOptions{})
			if c.wantErr == "" {
				if err != nil || info.Checksum != c.backup+".sha256" {
					t.Errorf("restore: %+v, %v; want it checked against %s.sha256", info, err, c.backup)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("restore: %v, want an error saying %q", err, c.wantErr)
			}
			if _, err := os.Stat(to); err == nil {
				t.Error("a refused restore made the store")
			}
		})
	}
	if err := os.Mkdir(backup+".sha256", 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), backup, filepath.Join(t.TempDir(), "r.db"), RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("restore beside a directory for a checksum: %v", err)
	}
}

// A name sha256sum would escape is escaped as it escapes it, and read back.
func TestChecksumLineEscapes(t *testing.T) {
	sum := sha256.Sum256([]byte("x"))
	for _, name := range []string{"plain.db", `back\slash.db`, "new\nline.db", "car\rriage.db", "spa ce.db"} {
		line := checksumLine(sum[:], name)
		if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 || strings.Contains(line, "\r") {
			t.Errorf("%q: line %q is not one line", name, line)
		}
		if escaped := strings.ContainsAny(name, "\\\n\r"); escaped != strings.HasPrefix(line, `\`) {
			t.Errorf("%q: line %q, want a leading backslash only when escaped", name, line)
		}
		got, gotName, ok := parseChecksumLine([]byte(strings.TrimSuffix(line, "\n")))
		if !ok || !bytes.Equal(got, sum[:]) || gotName != name {
			t.Errorf("%q: read back %x %q %v", name, got, gotName, ok)
		}
	}
}
