package probe

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// PrivateContainerd2 is where scripts/install-containerd2 puts Debian
// sid's containerd 2.x (containerd, ctr, containerd-shim-runc-v2), next
// to a system's older one.
const PrivateContainerd2 = "/opt/tine/containerd2/bin"

// MinContainerd is the first containerd whose CRI plugin implements
// CheckpointContainer (the kubelet's checkpoint API): 1.6 and 1.7 answer
// Unimplemented.
const MinContainerd = "2.0"

const containerdFix = "install containerd >= " + MinContainerd + " (on Debian 12, scripts/install-containerd2 puts Debian sid's in " +
	PrivateContainerd2 + " without touching the system's)"

// Containerd2Dir is the directory of a containerd >= 2.0 with its ctr and
// runc shim: the private prefix when it holds one, else PATH's containerd
// when new enough; and the version it reports.
func Containerd2Dir() (dir, version string, err error) {
	var seen []string
	for _, bin := range []string{filepath.Join(PrivateContainerd2, "containerd"), "containerd"} {
		path, err := exec.LookPath(bin)
		if err != nil {
			continue
		}
		v, err := ContainerdVersion(path)
		if err != nil {
			seen = append(seen, err.Error())
			continue
		}
		if VersionAtLeast(v, MinContainerd) {
			dir := filepath.Dir(path)
			for _, b := range []string{"ctr", "containerd-shim-runc-v2"} {
				if _, err := exec.LookPath(filepath.Join(dir, b)); err != nil {
					return "", v, fmt.Errorf("containerd %s at %s has no %s next to it", v, path, b)
				}
			}
			return dir, v, nil
		}
		seen = append(seen, fmt.Sprintf("containerd %s at %s", v, path))
	}
	if len(seen) == 0 {
		return "", "", fmt.Errorf("no containerd in %s or on PATH", PrivateContainerd2)
	}
	return "", "", fmt.Errorf("no containerd >= %s: found %s", MinContainerd, strings.Join(seen, "; "))
}

// ContainerdVersion reads `containerd --version`
// ("containerd github.com/containerd/containerd/v2 2.1.9+unknown"; 1.6's
// has a commit after the version).
func ContainerdVersion(path string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), criuTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if f := strings.Fields(string(out)); err == nil && len(f) >= 3 {
		return strings.TrimPrefix(f[2], "v"), nil
	}
	return "", fmt.Errorf("%s --version: %s", path, firstLine(string(out), err))
}

func checkContainerd2() Check {
	dir, v, err := Containerd2Dir()
	if err != nil {
		return Check{Detail: err.Error(), Version: v, Fix: containerdFix}
	}
	return Check{OK: true, Detail: fmt.Sprintf("containerd %s at %s", v, dir), Version: v}
}
