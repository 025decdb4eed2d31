//go:build !linux

package flush

import (
	"errors"
	"os"
)

type aio struct{ fd int }

func newAIO(*os.File) (*aio, error) { return nil, errors.New("AIO: Linux only") }
func (*aio) fdatasync() error       { return nil }
func (*aio) close() error           { return nil }
