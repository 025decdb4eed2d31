package flush

import (
	"syscall"
	"testing"
	"unsafe"
)

// The kernel reads 64-byte iocbs and writes 32-byte io_events.
func TestKernelStructSizes(t *testing.T) {
	if n := unsafe.Sizeof(iocb{}); n != 64 {
		t.Errorf("iocb is %d bytes, want 64", n)
	}
	if n := unsafe.Sizeof(ioEvent{}); n != 32 {
		t.Errorf("ioEvent is %d bytes, want 32", n)
	}
	if n := unsafe.Offsetof(iocb{}.opcode); n != 16 {
		t.Errorf("iocb.opcode at %d, want 16", n)
	}
	if n := unsafe.Offsetof(iocb{}.fildes); n != 20 {
		t.Errorf("iocb.fildes at %d, want 20", n)
	}
	if n := unsafe.Offsetof(iocb{}.flags); n != 56 {
		t.Errorf("iocb.flags at %d, want 56", n)
	}
	if n := unsafe.Offsetof(ioEvent{}.res); n != 16 {
		t.Errorf("ioEvent.res at %d, want 16", n)
	}
}

// The completion is waited for through the netpoller only while the
// eventfd is non-blocking; were it blocking, each wait would hold a
// thread (and on one core the P) as fsync does, silently.
func TestCompletionWaitStaysNonBlocking(t *testing.T) {
	s := New(tempFile(t))
	defer s.Close()
	if s.async == nil {
		t.Fatal("no AIO")
	}
	for range 3 {
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	flags, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(s.async.efd), syscall.F_GETFL, 0)
	if e != 0 {
		t.Fatal(e)
	}
	if flags&syscall.O_NONBLOCK == 0 {
		t.Error("the eventfd is in blocking mode: waits hold a thread")
	}
}
