package flush

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// Linux native AIO, from linux/aio_abi.h.
const (
	iocbCmdFdsync = 3
	iocbFlagResfd = 1 << 0
	efdNonblock   = syscall.O_NONBLOCK
	efdCloexec    = syscall.O_CLOEXEC
)

// iocb is struct iocb; the fields left blank are those an fdatasync does
// not use (on a big-endian machine aio_key and aio_rw_flags swap places,
// both blank).
type iocb struct {
	_      uint64 // aio_data
	_      uint32 // aio_key
	_      int32  // aio_rw_flags
	opcode uint16
	_      int16 // aio_reqprio
	fildes uint32
	_      uint64 // aio_buf
	_      uint64 // aio_nbytes
	_      int64  // aio_offset
	_      uint64 // aio_reserved2
	flags  uint32
	resfd  uint32
}

// ioEvent is struct io_event.
type ioEvent struct {
	_   uint64 // data
	_   uint64 // obj
	res int64
	_   int64 // res2
}

type aio struct {
	ctx uintptr // aio_context_t
	fd  int     // the file's
	// done is the eventfd the kernel counts completions on, made
	// non-blocking so that os.File reads it through the netpoller; efd
	// is its number.
	done *os.File
	efd  int
	buf  [8]byte
}

func newAIO(f *os.File) (*aio, error) {
	a := &aio{fd: int(f.Fd())}
	if _, _, e := syscall.Syscall(syscall.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&a.ctx)), 0); e != 0 {
		return nil, fmt.Errorf("io_setup: %w", e)
	}
	efd, _, e := syscall.Syscall(syscall.SYS_EVENTFD2, 0, efdNonblock|efdCloexec, 0)
	if e != 0 {
		syscall.Syscall(syscall.SYS_IO_DESTROY, a.ctx, 0, 0)
		return nil, fmt.Errorf("eventfd: %w", e)
	}
	// A non-blocking descriptor: os.File registers it with the netpoller.
	a.done, a.efd = os.NewFile(efd, "aio-done"), int(efd)
	// f.Fd() put f's descriptor in blocking mode; that does not matter to
	// a regular file, which the netpoller does not watch.
	return a, nil
}

// fdatasync submits one IOCB_CMD_FDSYNC and waits for its completion.
func (a *aio) fdatasync() error {
	cb := iocb{opcode: iocbCmdFdsync, fildes: uint32(a.fd), flags: iocbFlagResfd, resfd: uint32(a.efd)}
	cbs := [1]*iocb{&cb}
	if err := aioCall("io_submit", syscall.SYS_IO_SUBMIT, a.ctx, 1, uintptr(unsafe.Pointer(&cbs[0]))); err != nil {
		return err
	}
	// The kernel copied the iocb; only its completion is left to wait for.
	if _, err := a.done.Read(a.buf[:]); err != nil {
		return fmt.Errorf("aio completion: %w", err)
	}
	var ev ioEvent
	if err := aioCall("io_getevents", syscall.SYS_IO_GETEVENTS, a.ctx, 1, 1, uintptr(unsafe.Pointer(&ev))); err != nil {
		return err
	}
	if ev.res < 0 {
		return &os.PathError{Op: "fdatasync", Path: "", Err: syscall.Errno(-ev.res)}
	}
	return nil
}

// aioCall makes an AIO system call that must handle exactly one iocb or
// event, again if a signal interrupted it or the kernel asked to retry.
func aioCall(name string, trap uintptr, args ...uintptr) error {
	var a [5]uintptr
	copy(a[:], args)
	for {
		n, _, e := syscall.Syscall6(trap, a[0], a[1], a[2], a[3], a[4], 0)
		switch {
		case e == syscall.EINTR || e == syscall.EAGAIN:
			continue
		case e != 0:
			return fmt.Errorf("%s: %w", name, e)
		case n != 1:
			return fmt.Errorf("%s: %d instead of 1", name, n)
		}
		return nil
	}
}

func (a *aio) close() error {
	_, _, e := syscall.Syscall(syscall.SYS_IO_DESTROY, a.ctx, 0, 0)
	err := a.done.Close()
	if e != 0 {
		return errors.Join(fmt.Errorf("io_destroy: %w", e), err)
	}
	return err
}
