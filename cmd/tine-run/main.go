// Command tine-run is the small front of tine: built as bin/tine (and as
// bin/tine-run, the same file), it runs `tine run` itself and execs the full
// program, tine-full next to it, for every other command. A one-shot run is
// mostly the start of the program that makes it, and the full program's
// start is that of every package of every command (package initialisation,
// runtime tables, page faults: ADR 0023 measures ~4 ms of CPU of a 14 ms
// run); this one links only internal/runcli.
//
// Invoked as tine-run it is `tine run` alone: tine-run [flags] -- CMD.
// What it does not parse itself (--image and its flags, -h, a bad flag, no
// command) it hands to the full program's `tine run` with the same
// arguments, so that help, errors and images are tine run's own.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"github.com/tine-run/tine/internal/runcli"
)

func main() {
	args := os.Args[1:]
	if !strings.HasSuffix(filepath.Base(os.Args[0]), runcli.RunSuffix) {
		if len(args) == 0 || args[0] != "run" {
			execFull(args)
		}
		args = args[1:]
	}
	var f runcli.Flags
	fl := pflag.NewFlagSet("tine-run", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.SetInterspersed(false)
	f.Register(fl)
	if err := fl.Parse(args); err != nil || fl.NArg() == 0 {
		execFull(append([]string{"run"}, args...))
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

// execFull execs the full program with args: tine-full next to this binary
// (runcli.FullProgram), else tine-full on PATH, else, for a tine-run
// installed beside a full program of the older layout, tine there.
func execFull(args []string) {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	var path string
	for _, c := range []string{runcli.FullProgram(self), "tine" + runcli.FullSuffix} {
		if path, err = exec.LookPath(c); err == nil {
			break
		}
	}
	if err != nil && strings.HasSuffix(filepath.Base(os.Args[0]), runcli.RunSuffix) {
		path, err = exec.LookPath(filepath.Join(filepath.Dir(self), "tine"))
	}
	if err == nil {
		err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	}
	fmt.Fprintf(os.Stderr, "tine: this is tine's front, which runs `tine run` only; every other command, help, --image and its flags are the full program's, tine%s, and it was not found next to %s or on PATH (%v): make build builds it; install it beside tine\n", runcli.FullSuffix, self, err)
	os.Exit(1)
}
