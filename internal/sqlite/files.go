package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// The store's files hold webhook signing secrets in clear, token hashes
// and every plant, so no other local user may read them. SQLite creates the
// write-ahead log (-wal), its index (-shm) and a rollback journal with the
// permissions of the main file, so creating the main file 0600 before
// SQLite opens it is enough for all of them; the lock file (lock_unix.go)
// and backups (backup.go) are created 0600 too.

// sidecars are the suffixes of the files SQLite keeps beside a store.
var sidecars = []string{"-wal", "-shm", "-journal"}

// ErrNoStore is the error of Open with MustExist when there is no store
// at the path.
var ErrNoStore = errors.New("there is no store")

// resolve makes path absolute and follows the symbolic links to the file
// it names, when there is one: the lock a server holds, the log files and
// the file a restore replaces are then the real file's, whichever link
// names it. Otherwise two servers could share one file, each locking a
// lock beside its own name for it.
func resolve(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if target, err := filepath.EvalSymlinks(abs); err == nil {
		return target, nil
	}
	return abs, nil
}

// checkDirectory fails at once, naming the directory and the cause, when
// the store's directory is missing or this process may not create files
// in it: SQLite creates its log (-wal, -shm) there, and would otherwise
// fail later with "unable to open database file", or "attempt to write a
// readonly database" after the busy timeout. A probe file tells, where
// permission bits would not (a read-only file system, ACLs, root). abs
// is resolved (resolve): a link's target's directory is the one checked.
func checkDirectory(abs string) error {
	dir := filepath.Dir(abs)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("the store %s is in a directory that does not exist (%s): create it first", abs, dir)
	case err != nil:
		return fmt.Errorf("the store %s: its directory: %w", abs, err)
	case !fi.IsDir():
		return fmt.Errorf("the store %s: %s is not a directory", abs, dir)
	}
	// A directory given for the store is said to be one, wherever it is,
	// not that its parent may not be written.
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return fmt.Errorf("the store %s cannot be opened for writing: is a directory", abs)
	}
	probe, err := os.CreateTemp(dir, ".plantstore-probe-*")
	if err != nil {
		return fmt.Errorf("the store %s: cannot create files in its directory %s (SQLite keeps its log there): %w", abs, dir, unwrapPath(err))
	}
	return errors.Join(probe.Close(), os.Remove(probe.Name()))
}

// emptyFile says whether the file at abs holds no store yet: it has no
// bytes, and no log beside it holds any (a file made with touch, or left
// by a tool that meant to make one). SQLite would take it as an empty
// database; plantstore takes it as no store, so that only the commands
// that make a store make one there, and say so.
func emptyFile(abs string) bool {
	fi, err := os.Stat(abs)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		return false
	}
	wal, err := os.Stat(abs + "-wal")
	return err != nil || wal.Size() == 0
}

// noStoreInEmpty is the refusal of the empty file at abs by a command
// that needs a store.
func noStoreInEmpty(abs string) error {
	return fmt.Errorf("%w at %s (the file there is empty)", ErrNoStore, abs)
}

// unwrapPath is the cause of a file error without the path, which the
// message around it names already.
func unwrapPath(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// prepareFiles makes the store's main file at abs, 0600, if there is none
// (unless mustExist: then it fails with ErrNoStore), checks that this
// process may write it, and refuses a symbolic link where SQLite would
// create a file: a link planted beside the store would make plantstore
// create, or write its log into, the link's target. A store that is itself
// a link to an existing file is accepted (an operator's choice): abs is
// then its target (resolve), beside which SQLite keeps its log and the
// check is made. created says whether the file is new.
func prepareFiles(abs string, mustExist bool) (created bool, err error) {
	if err := noSwapNote(abs); err != nil {
		return false, err
	}
	flags := os.O_RDWR | os.O_CREATE | os.O_EXCL
	if mustExist {
		flags = os.O_RDWR
	} else if err := noLeftovers(abs); err != nil {
		return false, err
	}
	f, err := os.OpenFile(abs, flags, 0o600)
	switch {
	case err == nil && !mustExist:
		created = true
		// The umask may have taken bits off; it never adds any, but make
		// sure the owner can read and write.
		err = errors.Join(f.Chmod(0o600), f.Close())
		if err != nil {
			return created, fmt.Errorf("create %s: %w", abs, err)
		}
	case err == nil:
		if err := closeOneName(f, abs); err != nil {
			return false, err
		}
	case errors.Is(err, fs.ErrExist):
		// O_EXCL does not follow a link: a dangling one lands here too.
		if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("%s is a symbolic link to a file that does not exist; refusing to create its target (remove the link, or point it at an existing store)", abs)
		}
		// Every command writes (SQLite's log, if nothing else): a store
		// this process may not write is refused now, not at its first
		// write.
		f, err := os.OpenFile(abs, os.O_RDWR, 0)
		if err != nil {
			return false, fmt.Errorf("the store %s cannot be opened for writing: %w%s", abs, unwrapPath(err), ownerHint(err, abs, abs))
		}
		if err := closeOneName(f, abs); err != nil {
			return false, err
		}
	case mustExist && errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("%w at %s", ErrNoStore, abs)
	case mustExist:
		return false, fmt.Errorf("the store %s cannot be opened for writing: %w%s", abs, unwrapPath(err), ownerHint(err, abs, abs))
	default:
		return false, fmt.Errorf("create the store %s: %w", abs, unwrapPath(err))
	}
	for _, suffix := range sidecars {
		if fi, err := os.Lstat(abs + suffix); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return created, fmt.Errorf("%s%s is a symbolic link; refusing to open the store, as SQLite would write into its target (remove it)", abs, suffix)
		}
	}
	return created, nil
}

// explained is err, SQLite's failure to open the store at abs, or what
// unwritableSidecar finds behind it.
func explained(err error, abs string) error {
	if err == nil {
		return nil
	}
	if why := unwritableSidecar(abs); why != nil {
		return why
	}
	return err
}

// unwritableSidecar explains an open that failed (SQLite says only
// "unable to open database file (14)" of a log it may not write, as one
// a run of the same store as root left after a kill): the first file
// beside the store at abs this process may not write, or nil. Asked only
// once SQLite failed, so that no store it would open is refused.
func unwritableSidecar(abs string) error {
	for _, suffix := range sidecars {
		if _, err := os.Lstat(abs + suffix); err != nil {
			continue
		}
		if err := mayWrite(abs + suffix); err != nil {
			return fmt.Errorf("the store's file %s%s cannot be opened for writing: %w%s", abs, suffix, err, ownerHint(err, abs+suffix, abs))
		}
	}
	return nil
}

// ownerHint ends the message of a file of the store at store that this
// process may not write for its permissions (err): the cause, and the
// cure. A file of this user's is read-only (chmod); another user's was
// made by a command run as that user, as root (chown). A read-only file
// system, say, gets none.
func ownerHint(err error, file, store string) string {
	if !errors.Is(err, fs.ErrPermission) {
		return ""
	}
	fi, statErr := os.Stat(file)
	uid, known := 0, false
	if statErr == nil {
		uid, known = fileOwner(fi)
	}
	if known && uid == os.Geteuid() {
		// Not for its mode (an immutable file, say): no hint.
		if fi.Mode().Perm()&0o200 == 0 {
			return fmt.Sprintf(" (the file is read-only: chmod u+w %s)", file)
		}
		return ""
	}
	owner := "another user"
	if known {
		owner = "uid " + strconv.Itoa(uid)
		if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
			owner = u.Username
		}
	}
	return fmt.Sprintf(" (the file is %s's, not this user's: made by a command run as %[1]s? chown the store's files, %[2]s and its -wal, -shm and .lock, to the user that runs plantstore)", owner, store)
}

// leftovers lists the files SQLite keeps beside a store (sidecars) that
// are at abs when the store's own file is not: the log of a store whose
// file was deleted or moved, say while a server had it open (identity.go),
// and the server then killed. Its log may hold writes that were
// acknowledged; a new store made at abs would take it as its own (SQLite
// would replay it onto the new file, or remove it), so they are never
// passed over in silence.
func leftovers(abs string) []string {
	if _, err := os.Lstat(abs); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var found []string
	for _, suffix := range sidecars {
		// A symbolic link is no store's: prepareFiles refuses it.
		if fi, err := os.Lstat(abs + suffix); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
			found = append(found, abs+suffix)
		}
	}
	return found
}

// noLeftovers refuses to make a new store at abs beside the leftovers of
// another (see leftovers).
func noLeftovers(abs string) error {
	found := leftovers(abs)
	if len(found) == 0 {
		return nil
	}
	are, they, them := "are", "they", "them"
	if len(found) == 1 {
		are, they, them = "is", "it", "it"
	}
	return fmt.Errorf("%w at %s: %s %s there without the store's file, which was deleted or moved; %s may hold acknowledged writes, which a new store would discard: put the store's file back, or restore a backup (plantstore restore --force); to start a new store, move %s aside first",
		ErrLeftovers, abs, strings.Join(found, " and "), are, they, them)
}

// ErrLeftovers is the error of Open, where it may make a store, and of
// Restore without RestoreOptions.Replace, when the store's file is missing
// but files SQLite keeps beside it are there (leftovers).
var ErrLeftovers = errors.New("refusing to make a new store")

// closeOneName closes f, the store's file at abs, and refuses it if it
// has other names (hard links): SQLite keeps a log (-wal) per name, so
// what is written through one name can be lost through another, and the
// one-server lock, taken by name, would let a server under each name.
func closeOneName(f *os.File, abs string) error {
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return nil // the opening that follows says what is wrong
	}
	return oneName(fi, abs)
}

// oneName refuses the store at abs, whose file is fi, when the file has
// other names (closeOneName says why).
func oneName(fi fs.FileInfo, abs string) error {
	n := hardLinks(fi)
	if n <= 1 {
		return nil
	}
	// A backup or restore cut short between its link and its removal
	// leaves the other name beside the store: say which.
	other := ""
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(abs), "."+filepath.Base(abs)+".tmp-*"))
	for _, l := range leftovers {
		if lfi, err := os.Lstat(l); err == nil && os.SameFile(fi, lfi) {
			other = " (" + l + " is one, left by a backup or restore cut short)"
		}
	}
	return fmt.Errorf("the store %s has %d hard links (names for the one file)%s: SQLite keeps a log per name, so writes through one name can be lost through another, and a server under each name would not see the other's lock; keep one name (remove the other links; plantstore backup makes a copy)", abs, n, other)
}

// Warnings returns, one sentence each, what about the store at path
// exposes it to other local users: a file of the store (the main file,
// its -wal, -shm or -journal) that the group or others may read. serve
// logs them at start (at warn level), once the store is open and its log
// files exist. Stores made before plantstore created its files 0600 are
// 0644; they keep working, and the warning says how to close them.
func Warnings(path string) []string {
	abs, err := resolve(path)
	if err != nil {
		return nil
	}
	var open []string
	for _, suffix := range append([]string{""}, sidecars...) {
		fi, err := os.Stat(abs + suffix)
		if err == nil && fi.Mode().Perm()&0o077 != 0 {
			open = append(open, fmt.Sprintf("%s (%04o)", abs+suffix, fi.Mode().Perm()))
		}
	}
	if len(open) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("store files are open to other local users: %s; they hold webhook signing secrets, token hashes and every plant: chmod 600 them (plantstore creates new stores 0600)",
		strings.Join(open, ", "))}
}

// dropLock lets go of a sole-server lock taken for an Open or Restore that
// failed, and removes its file when that call made it, so that a refused
// file leaves nothing beside it. The file is removed while still held: a
// process that opened it meanwhile finds it gone once it has the lock,
// and locks again (lockSoleServer).
func dropLock(lock *os.File, created bool) {
	if created {
		os.Remove(lock.Name())
	}
	lock.Close()
}
