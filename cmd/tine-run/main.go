// Command tine-run is `tine run` as a small binary of its own: the same
// flags (but the image ones), the same sandbox, in-process or handed to a
// daemon, the same outcome and exit codes. A one-shot run is mostly the
// start of the program that makes it, and tine's start is that of every
// package of every command (package initialisation, runtime tables, page
// faults: ADR 0023 measures it at ~9 ms of CPU of a 20 ms run); tine-run
// links only internal/runcli.
//
// What it does not parse itself (--image and its flags, -h, a bad flag, no
// command) it hands to `tine run` with the same arguments, found next to
// it, so that help, errors and images are tine run's own.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"
	"github.com/tine-run/tine/internal/runcli"
)

func main() {
	var f runcli.Flags
	fl := pflag.NewFlagSet("tine-run", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.SetInterspersed(false)
	f.Register(fl)
	if err := fl.Parse(os.Args[1:]); err != nil || fl.NArg() == 0 {
		handToTine()
	}
	err := runcli.Run(f, fl.Args(), nil)
	if err == nil {
		return
	}
	var ee runcli.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.Code)
	}
	fmt.Fprintf(os.Stderr, "tine: %v\n", err)
	var ue runcli.UsageError
	if errors.As(err, &ue) {
		os.Exit(2)
	}
	os.Exit(1)
}

// handToTine execs `tine run` with tine-run's arguments: tine next to this
// binary, else the one on PATH.
func handToTine() {
	tine := "tine"
	if self, err := os.Executable(); err == nil {
		if next := filepath.Join(filepath.Dir(self), "tine"); isExecutable(next) {
			tine = next
		}
	}
	path, err := exec.LookPath(tine)
	if err == nil {
		err = syscall.Exec(path, append([]string{path, "run"}, os.Args[1:]...), os.Environ())
	}
	fmt.Fprintf(os.Stderr, "tine-run: help, --image and its flags are tine run's, and tine was not found next to tine-run or on PATH (%v): install tine beside it, or run tine run\n", err)
	os.Exit(2)
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
