// Command tine runs commands in fast, isolated Linux sandboxes.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/tine-run/tine/internal/runcli"
)

// exitError carries an exit code up to main without printing anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is bad command-line input: exit 2 with one line naming the flag
// and the accepted form.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// isUsage reports whether err is bad command-line input: tine's own, or
// from the flags it shares with tine-run (runcli).
func isUsage(err error) bool {
	var ue usageError
	var rue runcli.UsageError
	return errors.As(err, &ue) || errors.As(err, &rue)
}

// newBareRoot is the root command without subcommands.
func newBareRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "tine",
		Short: "Fast, isolated Linux sandboxes for AI agents",
		Long: `tine runs commands in isolated Linux sandboxes: fresh pid, mount, ipc, uts,
net and cgroup namespaces, an overlay root over the host's filesystem (or a
directory you give), cgroup limits, Docker's default seccomp policy, reduced
capabilities and Landlock.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	return root
}

func newRootCommand() *cobra.Command {
	root := newBareRoot()
	root.AddCommand(newRunCommand(), newDoctorCommand(), newBenchCommand(), newGCCommand(), newServeCommand(), newCreateCommand(), newExecCommand(), newPsCommand(), newInspectCommand(), newNetworkCommand(), newRmCommand(), newFnCommand(), newScriptCommand(), newDesktopCommand(), newSnapshotCommand(), newForkCommand(), newSessionCommand(), newGuestCommand(), newEnvdCommand(), newMCPCommand(), newOCICommand(),
		newPullCommand(), newLoadCommand(), newImagesCommand(), newRmiCommand(), newImageCommand())
	return root
}

// newRunRoot is the root with only `run`: tine run's start is on every
// one-shot sandbox's path, and building every command's flags is not
// (it is what `tine run ...` sees of the others anyway: nothing).
func newRunRoot() *cobra.Command {
	root := newBareRoot()
	root.AddCommand(newRunCommand())
	return root
}

func main() {
	root := newRootCommand
	if len(os.Args) > 1 && os.Args[1] == "run" {
		root = newRunRoot
	}
	err := root().Execute()
	if err == nil {
		return
	}
	var ee exitError
	var rce runcli.ExitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case errors.As(err, &rce):
		os.Exit(rce.Code)
	}
	fmt.Fprintf(os.Stderr, "tine: %v\n", err)
	if isUsage(err) {
		os.Exit(2)
	}
	os.Exit(1)
}
