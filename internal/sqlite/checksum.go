package sqlite

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ChecksumSuffix names the file Backup writes beside a backup: the
// backup's SHA-256 in the format of sha256sum, so that `sha256sum -c`
// checks it as well as Restore does. PRAGMA integrity_check finds a
// damaged structure; only a checksum finds changed contents (a flipped
// byte in a plant's name).
const ChecksumSuffix = ".sha256"

// maxChecksumFile bounds what Restore reads of a checksum file: one line
// is about a hundred bytes.
const maxChecksumFile = 64 << 10

// ChecksumMismatchError is Restore's refusal of a backup whose contents
// are not those its checksum file was written for.
type ChecksumMismatchError struct {
	ChecksumFile string
}

func (e *ChecksumMismatchError) Error() string {
	return fmt.Sprintf("its contents do not match the SHA-256 in %s: the file changed after its checksum was written, or is not the backup it was written for; nothing was changed (to restore it all the same, remove %s)",
		e.ChecksumFile, e.ChecksumFile)
}

// hashFile is the SHA-256 of the file at path.
func hashFile(path string) ([]byte, error) { return hashInto(io.Discard, path) }

// hashInto copies the file at path to w and returns its SHA-256.
func hashInto(w io.Writer, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h), f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// checksumLine is sha256sum's line for a file called name with the given
// digest: the hex digest, two spaces, the name. A name with a backslash or
// a line break is escaped as sha256sum escapes it, and the line then
// begins with a backslash.
func checksumLine(sum []byte, name string) string {
	escaped := strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`).Replace(name)
	prefix := ""
	if escaped != name {
		prefix = `\`
	}
	return prefix + hex.EncodeToString(sum) + "  " + escaped + "\n"
}

// writeChecksum writes the checksum line of a backup named name to the new
// file path, and syncs it.
func writeChecksum(path string, sum []byte, name string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, checksumLine(sum, name)); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readChecksum reads the digest the checksum file beside the backup at
// from gives for it, and that file's path; a nil digest when there is no
// such file. It reads what sha256sum writes and checks, with or without
// --tag: the line Backup wrote, or a file written by hand with
// `sha256sum FILE > FILE.sha256`, whatever path it names the backup by.
// A file of several lines must name the backup: by the path restore was
// given, or else by its base name, once.
func readChecksum(from string) (sum []byte, path string, err error) {
	path = from + ChecksumSuffix
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, path, nil
	}
	if err != nil {
		return nil, path, fmt.Errorf("its checksum file %s cannot be read: %w", path, unwrapPath(err))
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, path, fmt.Errorf("%s is a directory, where its checksum file would be; move it away", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxChecksumFile+1))
	if err != nil {
		return nil, path, fmt.Errorf("its checksum file %s cannot be read: %w", path, unwrapPath(err))
	}
	unusable := fmt.Errorf("its checksum file %s is not in a form restore reads (sha256sum's: 64 hex digits, two spaces and the backup's name; or sha256sum --tag's); %s", path, fixOrRemove)
	if len(b) > maxChecksumFile {
		return nil, path, unusable
	}
	type entry struct {
		sum  []byte
		name string
	}
	var entries []entry
	for line := range bytes.Lines(b) {
		line = bytes.TrimLeft(bytes.TrimRight(line, "\r\n"), " \t")
		if len(line) == 0 || line[0] == '#' { // sha256sum -c skips comments too
			continue
		}
		sum, name, ok := parseChecksumLine(line)
		if !ok {
			return nil, path, unusable
		}
		entries = append(entries, entry{sum, name})
	}
	switch len(entries) {
	case 0:
		return nil, path, unusable
	case 1:
		return entries[0].sum, path, nil
	}
	base := filepath.Base(from)
	var named []entry
	for _, e := range entries {
		if e.name == from || samePath(e.name, from) {
			return e.sum, path, nil
		}
		if filepath.Base(e.name) == base {
			named = append(named, e)
		}
	}
	for _, e := range named[min(1, len(named)):] {
		if !bytes.Equal(e.sum, named[0].sum) {
			return nil, path, fmt.Errorf("its checksum file %s names more than one file called %s, with different checksums; %s", path, base, fixOrRemove)
		}
	}
	if len(named) == 0 {
		return nil, path, fmt.Errorf("its checksum file %s names no file called %s; %s", path, base, fixOrRemove)
	}
	return named[0].sum, path, nil
}

// fixOrRemove ends Restore's refusals of a checksum file.
const fixOrRemove = "nothing was changed: fix it, or remove it to restore the backup unchecked"

// samePath reports whether the paths a and b name one file by their
// absolute forms.
func samePath(a, b string) bool {
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}

// parseChecksumLine reads one line of what sha256sum writes: a digest, a
// space, a space or '*' (binary mode) and the file's name; or, with
// --tag, "SHA256 (NAME) = DIGEST". A line that begins with a backslash
// has its name escaped.
func parseChecksumLine(line []byte) (sum []byte, name string, ok bool) {
	escaped := len(line) > 0 && line[0] == '\\'
	if escaped {
		line = line[1:]
	}
	const digits = 2 * sha256.Size
	var hexSum []byte
	if rest, found := bytes.CutPrefix(line, []byte("SHA256 (")); found {
		at := bytes.LastIndex(rest, []byte(") = "))
		if at < 0 {
			return nil, "", false
		}
		name, hexSum = string(rest[:at]), rest[at+4:]
	} else {
		if len(line) < digits+3 || line[digits] != ' ' || (line[digits+1] != ' ' && line[digits+1] != '*') {
			return nil, "", false
		}
		name, hexSum = string(line[digits+2:]), line[:digits]
	}
	if len(hexSum) != digits {
		return nil, "", false
	}
	sum, err := hex.DecodeString(string(hexSum))
	if err != nil {
		return nil, "", false
	}
	if escaped {
		name = strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\r`, "\r").Replace(name)
	}
	return sum, name, true
}
