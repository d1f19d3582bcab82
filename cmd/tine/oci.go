package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// newOCICommand is `tine oci …`: tine-runc, the OCI runtime binary found
// next to this one, under the name people type. (It is a binary of its own:
// it links the seccomp compiler, which this one's start must not pay for.)
func newOCICommand() *cobra.Command {
	return &cobra.Command{
		Use:                "oci [ARGS...]",
		Short:              "tine as an OCI runtime: runc's command line (runs tine-runc, found next to tine)",
		Long:               "oci runs tine-runc, tine's OCI runtime, with ARGS: `tine oci --help` lists its commands. See docs/kubernetes.md.",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			runc := filepath.Join(filepath.Dir(self), "tine-runc")
			if _, err := os.Stat(runc); err != nil {
				return fmt.Errorf("tine-runc is not next to tine (%s): build it with make build, or install it beside tine", runc)
			}
			return syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
		},
	}
}
