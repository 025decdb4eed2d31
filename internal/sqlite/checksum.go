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
	Backup, ChecksumFile string
}

func (e *ChecksumMismatchError) Error() string {
	return fmt.Sprintf("its contents do not match the SHA-256 in %s: the file changed after its checksum was written, or is not the backup it was written for; nothing was changed (to restore it all the same, remove %s)",
		e.ChecksumFile, e.ChecksumFile)
}

// hashFile is the SHA-256 of the file at path.
func hashFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
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
// such file. It takes what sha256sum writes: the line Backup wrote, or
// one written by hand with `sha256sum FILE > FILE.sha256`, whatever path
// it names the backup by. A file of several lines must have one whose
// name ends in the backup's name.
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
	unusable := fmt.Errorf("its checksum file %s is not one sha256sum can check (a line of 64 hex digits, two spaces and the backup's name); nothing was changed: fix it, or remove it to restore the backup unchecked", path)
	if len(b) > maxChecksumFile {
		return nil, path, unusable
	}
	var lines [][]byte
	for line := range bytes.Lines(b) {
		if line = bytes.TrimRight(line, "\r\n"); len(line) > 0 {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return nil, path, unusable
	}
	base := filepath.Base(from)
	for _, line := range lines {
		sum, name, ok := parseChecksumLine(line)
		if !ok {
			return nil, path, unusable
		}
		if len(lines) == 1 || filepath.Base(name) == base {
			return sum, path, nil
		}
	}
	return nil, path, fmt.Errorf("its checksum file %s names no file called %s; nothing was changed: fix it, or remove it to restore the backup unchecked", path, base)
}

// parseChecksumLine reads one line of sha256sum's output: a digest, a
// space, a space or '*' (binary mode), and the file's name, escaped when
// the line begins with a backslash.
func parseChecksumLine(line []byte) (sum []byte, name string, ok bool) {
	escaped := len(line) > 0 && line[0] == '\\'
	if escaped {
		line = line[1:]
	}
	const digits = 2 * sha256.Size
	if len(line) < digits+3 || line[digits] != ' ' || (line[digits+1] != ' ' && line[digits+1] != '*') {
		return nil, "", false
	}
	sum, err := hex.DecodeString(string(line[:digits]))
	if err != nil {
		return nil, "", false
	}
	name = string(line[digits+2:])
	if escaped {
		name = strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\r`, "\r").Replace(name)
	}
	return sum, name, true
}
