package inroot

import (
	"errors"

	"golang.org/x/sys/unix"
)

// kernelError is an errno mapped to a sentinel: errors.Is matches both.
type kernelError struct {
	sentinel error
	errno    unix.Errno
	detail   string
}

func (e *kernelError) Error() string {
	if e.detail == "" {
		return e.sentinel.Error()
	}
	return e.sentinel.Error() + ": " + e.detail
}

func (e *kernelError) Unwrap() []error { return []error{e.sentinel, e.errno} }

// mapErrno attaches the sentinel an errno stands for; other errors are
// returned as they are.
func mapErrno(err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return err
	}
	e := &kernelError{errno: errno}
	switch errno {
	case unix.ENOENT:
		e.sentinel = ErrNotFound
	case unix.EEXIST:
		e.sentinel = ErrExists
	case unix.ENOTDIR:
		e.sentinel = ErrNotDir
	case unix.EISDIR:
		e.sentinel = ErrIsDir
	case unix.ENOTEMPTY:
		e.sentinel = ErrNotEmpty
	case unix.ELOOP:
		e.sentinel, e.detail = ErrInvalidPath, "symlink loop or magic link"
	case unix.ENAMETOOLONG:
		e.sentinel, e.detail = ErrInvalidPath, "name too long"
	case unix.ENOSYS, unix.EOPNOTSUPP:
		e.sentinel, e.detail = ErrUnsupported, errno.Error()
	case unix.EFBIG:
		e.sentinel, e.detail = ErrTooLarge, errno.Error()
	default:
		return err
	}
	return e
}
