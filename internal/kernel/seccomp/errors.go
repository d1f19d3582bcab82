package seccomp

import "errors"

// ErrUnknownMode is returned by ParseMode for a name that is not a Mode.
var ErrUnknownMode = errors.New("unknown seccomp mode")
