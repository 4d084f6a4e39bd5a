package spec

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ReadFile reads a file a document is made of, the spec itself or a file one of its $refs
// names, within the bounds Load puts on the spec: only a regular file is read, so a device
// (/dev/zero, /dev/stdin) or a FIFO is refused at once instead of being read forever or
// waited on, and a file over limit bytes (negative: no limit) is refused, before it is read
// when its size says so, else as soon as its bytes pass the limit. The error names path first.
func ReadFile(path string, limit int64) ([]byte, error) {
	if fi, err := os.Stat(path); err == nil {
		if err := notRegular(path, fi); err != nil {
			return nil, err
		}
	}
	// O_NONBLOCK: a FIFO put in the file's place since the Stat would otherwise block the open
	// until a writer came; a regular file reads as usual.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &ReadError{Path: path, Err: unwrapPathError(err)}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, &ReadError{Path: path, Err: unwrapPathError(err)}
	}
	if err := notRegular(path, fi); err != nil {
		return nil, err
	}
	if limit >= 0 && fi.Size() > limit {
		return nil, SizeError(path, fi.Size(), limit)
	}
	var r io.Reader = f
	if limit >= 0 {
		r = io.LimitReader(f, limit+1) // a file that grows while read: one byte more says it is over
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, &ReadError{Path: path, Err: unwrapPathError(err)}
	}
	if limit >= 0 && int64(len(data)) > limit {
		return nil, SizeError(path, int64(len(data)), limit)
	}
	return data, nil
}

// ReadError is a file that could not be opened or read (it does not exist, say).
type ReadError struct {
	Path string
	Err  error
}

func (e *ReadError) Error() string { return e.Path + ": cannot read it: " + e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// NotRegularError is a spec, or a file one of its $refs names, that is not a regular file.
type NotRegularError struct {
	Path string
	Kind string // "a directory", "a character device", "a FIFO (named pipe)", …
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: is %s, not a regular file: a spec and the files its $refs name are read only from regular files (a device or a pipe could be read forever, or wait forever)", e.Path, e.Kind)
}

func notRegular(path string, fi fs.FileInfo) error {
	m := fi.Mode()
	if m.IsRegular() {
		return nil
	}
	kind := "not a regular file"
	switch {
	case m.IsDir():
		kind = "a directory"
	case m&fs.ModeNamedPipe != 0:
		kind = "a FIFO (named pipe)"
	case m&fs.ModeCharDevice != 0:
		kind = "a character device"
	case m&fs.ModeDevice != 0:
		kind = "a block device"
	case m&fs.ModeSocket != 0:
		kind = "a socket"
	case m&fs.ModeIrregular != 0:
		kind = "an irregular file"
	}
	return &NotRegularError{Path: path, Kind: kind}
}

// isNotRegular reports a NotRegularError in err's chain.
func isNotRegular(err error) bool {
	var nr *NotRegularError
	return errors.As(err, &nr)
}
