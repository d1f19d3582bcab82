package runcli

import "fmt"

// UsageError is bad command-line input: the CLI exits 2 with its one line,
// which names the flag and the accepted form.
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// ExitError carries the command's exit code up to the CLI's main, which
// exits with it and prints nothing more.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

func usage(format string, a ...any) error { return UsageError{fmt.Sprintf(format, a...)} }
