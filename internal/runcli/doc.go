// Package runcli is `tine run` without its image flags: the flags, the
// spec they make, and the run itself, in-process or handed to a daemon.
// Two binaries build it: tine (cmd/tine, which adds --image and the rest)
// and tine-run (cmd/tine-run), a small binary that is only this, so that a
// one-shot run does not pay the whole of tine's start (ADR 0023).
package runcli
