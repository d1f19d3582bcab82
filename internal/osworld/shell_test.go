package osworld

import "os"

// The xterms these tests start on the host run /bin/sh: the host user's
// interactive shell reads rc files that can stall it (a stale pyenv rehash
// lock waits 60 s), and the typing tests would fail on the machine, not
// on tine.
func init() { os.Setenv("SHELL", "/bin/sh") }
