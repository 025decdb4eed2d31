// Package flush syncs a file to stable storage without holding a Go
// processor for the wait.
//
// fsync blocks the thread that calls it for the disk's flush, about
// 0.1 ms here. A goroutine in a blocking system call keeps its P until
// the runtime's monitor takes the P back, 20 µs to 10 ms later, and on
// one core (GOMAXPROCS=1) nothing else runs meanwhile; when the call
// returns, the goroutine waits in the global run queue for a P again.
// On Linux a Syncer instead asks the kernel for the flush with native
// AIO (IOCB_CMD_FDSYNC, done by a kernel worker) and waits for its
// completion on an eventfd through the netpoller, as a socket read
// waits: the P goes on running handlers.
//
// Elsewhere, or where the kernel refuses AIO, it calls fsync.
package flush

import "os"

// Syncer syncs one file. Sync may be called by one goroutine at a time.
type Syncer struct {
	f     *os.File
	async *aio // nil: fsync
}

// New returns a Syncer of f, which must stay open while the Syncer is
// used. It tries one asynchronous sync of f; if the kernel refuses (no
// AIO, or a file system without it), the Syncer calls fsync.
func New(f *os.File) *Syncer {
	s := &Syncer{f: f}
	if a, err := newAIO(f); err == nil {
		if err := a.fdatasync(); err == nil {
			s.async = a
		} else {
			a.close()
		}
	}
	return s
}

// Sync returns once the data written to the file before it was called is
// on stable storage (fdatasync: the data and the size, not times).
func (s *Syncer) Sync() error {
	if s.async == nil {
		return s.f.Sync()
	}
	err := s.async.fdatasync()
	if err != nil {
		// Whatever failed, a completion may still be due, which would
		// answer a later wait too early: no more AIO on this Syncer.
		s.async.close()
		s.async = nil
	}
	return err
}

// Close releases what the Syncer holds; not the file.
func (s *Syncer) Close() error {
	if s.async == nil {
		return nil
	}
	return s.async.close()
}
