// Command tine-runc is tine as an OCI runtime: runc's command line, for
// containerd's runc shim and CRI-O (docs/kubernetes.md). It is a binary of
// its own because it links the seccomp compiler for configs' profiles,
// whose package initialisation (0.24 ms) tine's own start must not pay.
package main

import "github.com/tine-run/tine/internal/oci/cli"

func main() { cli.Main("tine-runc") }
