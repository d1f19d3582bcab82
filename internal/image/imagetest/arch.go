package imagetest

import (
	"io"
	"log"
	"runtime"
)

func hostArch() string { return runtime.GOARCH }

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }
