package sandbox

import (
	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/sysmon"
)

// resetTimerSlack makes the process's first step give it tine's own timer
// slack: the thread that cloned it may have inherited the one `tine serve`
// gives the Go runtime's sysmon (internal/kernel/sysmon), which nothing in
// a sandbox may get (every sleep and timeout there could end up to a
// millisecond late). No step where nothing was changed (`tine run`).
func (pg *program) resetTimerSlack() {
	if s := sysmon.ChildSlack(); s > 0 {
		pg.addSetup("reset the timer slack", sys(unix.SYS_PRCTL, unix.PR_SET_TIMERSLACK, s))
	}
}
