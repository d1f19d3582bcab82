package e2b

import (
	"net/http"
	"os"
	"os/exec"
	"strings"

	"github.com/tine-run/tine/api"
)

// DesktopTemplate is @e2b/desktop's default template. On tine it is the
// host's OS view, like base: the SDK starts everything itself through
// commands.run (Xvfb on DISPLAY, startxfce4, then xdotool, scrot,
// xdpyinfo, xrandr per call), so what the template needs is those
// programs in the root.
const DesktopTemplate = "desktop"

// desktopPrograms are the programs @e2b/desktop 2.4 runs at create and
// for screenshot, mouse and keyboard calls (read from its source).
var desktopPrograms = []string{"Xvfb", "xdpyinfo", "startxfce4", "xfce4-session", "xfwm4", "xfdesktop", "dbus-launch", "xdotool", "scrot", "xrandr"}

// noVNCHost is where Debian's novnc package keeps noVNC (utils/novnc_proxy
// included); the desktop template binds it at /opt/noVNC, where the SDK
// looks.
const noVNCHost = "/usr/share/novnc"

// desktopTemplate is the spec of a desktop sandbox, or a clear error
// naming what the host lacks (the SDK would otherwise wait a minute for
// XFCE and say only that it did not start).
func desktopTemplate() (*template, error) {
	var missing []string
	for _, p := range desktopPrograms {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return nil, errorf(http.StatusBadRequest, "template %q needs %s in the host's root, which tine's desktop sandboxes see: install xvfb x11-utils xfce4-session xfwm4 xfdesktop4 dbus-x11 xdotool scrot x11-xserver-utils (Debian; make deps does)", DesktopTemplate, strings.Join(missing, ", "))
	}
	t := &template{}
	if st, err := os.Stat(noVNCHost + "/utils/novnc_proxy"); err == nil && !st.IsDir() {
		t.spec.Binds = append(t.spec.Binds, api.Bind{Source: noVNCHost, Target: "/opt/noVNC", ReadOnly: true})
	}
	return t, nil
}
