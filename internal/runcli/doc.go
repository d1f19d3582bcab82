// Package runcli is `tine run` without its image flags: the flags, the
// spec they make, and the run itself, in-process or handed to a daemon.
// Two programs build it: the full one (cmd/tine, which adds --image and
// every other command) and the front (cmd/tine-run), which is only this
// and execs the full program for the rest, so that a one-shot run does
// not pay the whole of tine's start (ADR 0023). layout.go names the files
// make build installs side by side.
package runcli
