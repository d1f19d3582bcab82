package guest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// An Account is the user a desktop's session runs as (Options.User): its
// window manager, apps, session bus and OSWorld's commands.
type Account struct {
	Name     string
	UID, GID uint32
	Groups   []uint32
	Home     string
}

// Credential is what a process started as the account runs with.
func (a *Account) Credential() *syscall.Credential {
	return &syscall.Credential{Uid: a.UID, Gid: a.GID, Groups: a.Groups}
}

// Env is the login environment of the account.
func (a *Account) Env() []string {
	return []string{"HOME=" + a.Home, "USER=" + a.Name, "LOGNAME=" + a.Name, "SHELL=/bin/bash"}
}

// AccountPassword is the account's password: OSWorld's VMs' (its tasks
// pipe it to `sudo -S`). It protects nothing from code in the desktop —
// OSWorld's prompts print it — and sudo reaches only the sandbox's root.
const AccountPassword = "password"

// accountPasswordHash is AccountPassword as /etc/shadow holds it:
// `openssl passwd -6 -salt tineosworld password`.
const accountPasswordHash = "$6$tineosworld$UJB8BHqqoELdz/SvK7fw/9DuLMy0RBckrf8ay1/4Dkk4iLbKK/0lavYvFgLYLL3RFjczImiyFSgBU6bHFLOS80"

// EnsureAccount makes the account name in the desktop's /etc under root
// ("/" inside the sandbox, where every write lands in the desktop's own
// upper layer: the host's /etc is the read-only base), unless it is there
// already (a fork of a snapshot of a desktop keeps it): an entry in
// passwd, group and shadow with AccountPassword, membership of the sudo
// group with a sudoers that lets it (the host view shows sudoers, mode
// 0440, empty), and a home with a Desktop; also the host name in hosts
// (sudo looks it up) and `python` for python3. Its uid is 1000 when the
// host has no such uid, else the first free one above.
func EnsureAccount(root, name string) (*Account, error) {
	etc := filepath.Join(root, "etc")
	passwd, err := readTable(filepath.Join(etc, "passwd"))
	if err != nil {
		return nil, err
	}
	group, err := readTable(filepath.Join(etc, "group"))
	if err != nil {
		return nil, err
	}
	a := &Account{Name: name, Home: "/home/" + name}
	if e := passwd.find(name); e != nil {
		uid, err1 := strconv.ParseUint(e[2], 10, 32)
		gid, err2 := strconv.ParseUint(e[3], 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("account %s: /etc/passwd has uid %q and gid %q", name, e[2], e[3])
		}
		a.UID, a.GID = uint32(uid), uint32(gid)
		if len(e) > 5 && e[5] != "" {
			a.Home = e[5]
		}
	} else {
		a.UID = passwd.freeID(group)
		a.GID = a.UID
		if err := appendLine(filepath.Join(etc, "passwd"), fmt.Sprintf("%s:x:%d:%d:%s:%s:/bin/bash", name, a.UID, a.GID, name, a.Home)); err != nil {
			return nil, err
		}
	}
	if group.find(name) == nil && group.byID(a.GID) == nil {
		if err := appendLine(filepath.Join(etc, "group"), fmt.Sprintf("%s:x:%d:", name, a.GID)); err != nil {
			return nil, err
		}
	}
	if sudo := group.find("sudo"); sudo == nil {
		if err := appendLine(filepath.Join(etc, "group"), "sudo:x:27:"+name); err != nil {
			return nil, err
		}
		a.Groups = []uint32{27}
	} else {
		members := strings.Split(sudo[3], ",")
		if !slices.Contains(members, name) {
			if err := addMember(filepath.Join(etc, "group"), "sudo", name); err != nil {
				return nil, err
			}
		}
		gid, _ := strconv.ParseUint(sudo[2], 10, 32)
		a.Groups = []uint32{uint32(gid)}
	}
	shadowGID := -1 // Debian's shadow is root:shadow 0640
	if e := group.find("shadow"); e != nil {
		if g, err := strconv.Atoi(e[2]); err == nil {
			shadowGID = g
		}
	}
	if err := ensureShadow(filepath.Join(etc, "shadow"), name, shadowGID); err != nil {
		return nil, err
	}
	if err := ensureSudoers(etc, name); err != nil {
		return nil, err
	}
	if err := ensureHostname(etc); err != nil {
		return nil, err
	}
	if err := ensurePython(root); err != nil {
		return nil, err
	}
	for _, d := range []string{a.Home, filepath.Join(a.Home, "Desktop")} {
		p := filepath.Join(root, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, fmt.Errorf("account %s: %w", name, err)
		}
		if err := os.Lchown(p, int(a.UID), int(a.GID)); err != nil {
			return nil, fmt.Errorf("account %s: %w", name, err)
		}
	}
	return a, nil
}

// table is a colon-separated file of /etc: passwd or group.
type table [][]string

func readTable(p string) (table, error) {
	b, err := readOptional(p)
	if err != nil {
		return nil, err
	}
	var t table
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Split(sc.Text(), ":"); len(f) >= 4 {
			t = append(t, f)
		}
	}
	return t, nil
}

func (t table) find(name string) []string {
	for _, e := range t {
		if e[0] == name {
			return e
		}
	}
	return nil
}

// byID finds the entry whose id (field 2: passwd's uid, group's gid) is id.
func (t table) byID(id uint32) []string {
	for _, e := range t {
		if e[2] == strconv.FormatUint(uint64(id), 10) {
			return e
		}
	}
	return nil
}

// freeID is the first id from 1000 up taken neither in t nor in other.
func (t table) freeID(other table) uint32 {
	for id := uint32(1000); ; id++ {
		if t.byID(id) == nil && other.byID(id) == nil {
			return id
		}
	}
}

// addMember rewrites group file p with name added to group g's members,
// every other line as it was.
func addMember(p, g, name string) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, g+":") {
			continue
		}
		l = strings.TrimRight(l, "\n")
		if !strings.HasSuffix(l, ":") {
			l += ","
		}
		lines[i] = l + name + "\n"
	}
	return writeFile(p, strings.Join(lines, ""), 0o644)
}

func ensureShadow(p, name string, gid int) error {
	b, err := readOptional(p)
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+":") {
			return nil
		}
	}
	// The host view empties shadow: root gets a locked entry, as a fresh
	// Debian's, so that PAM finds it.
	text := string(b)
	if !strings.Contains("\n"+text, "\nroot:") {
		text += "root:*:19000:0:99999:7:::\n"
	}
	if err := writeFile(p, text+name+":"+accountPasswordHash+":19000:0:99999:7:::\n", 0o640); err != nil {
		return err
	}
	if gid >= 0 {
		os.Chown(p, 0, gid)
	}
	return nil
}

func ensureSudoers(etc, name string) error {
	p := filepath.Join(etc, "sudoers")
	if st, err := os.Stat(p); err == nil && st.Size() > 0 {
		// An image's own sudoers: a drop-in for the account (Debian's
		// includes /etc/sudoers.d).
		return writeFile(filepath.Join(etc, "sudoers.d", "tine-"+name), name+" ALL=(ALL:ALL) ALL\n", 0o440)
	}
	return writeFile(p, `# Written by tine's desktop guest: the host view hides the host's sudoers.
Defaults	env_reset
Defaults	secure_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
root	ALL=(ALL:ALL) ALL
%sudo	ALL=(ALL:ALL) ALL
@includedir /etc/sudoers.d
`, 0o440)
}

func appendLine(p, line string) error {
	b, err := readOptional(p)
	if err != nil {
		return err
	}
	text := string(b)
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return writeFile(p, text+line+"\n", 0o644)
}

// readOptional reads p, empty when it does not exist.
func readOptional(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return b, nil
}

// writeFile replaces p by rename, so that a reader never sees half of it.
func writeFile(p, text string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	tmp := p + ".tine-new"
	if err := os.WriteFile(tmp, []byte(text), mode); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := os.Chmod(tmp, mode); err != nil { // not the umask's
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// ensureHostname maps the sandbox's host name to 127.0.1.1 in hosts, as
// Debian's installer does, when hosts does not name it: sudo looks its
// host up and would warn on every call (the desktop has no DNS).
func ensureHostname(etc string) error {
	name, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("host name: %w", err)
	}
	p := filepath.Join(etc, "hosts")
	b, err := readOptional(p)
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && !strings.HasPrefix(f[0], "#") && slices.Contains(f[1:], name) {
			return nil
		}
	}
	return appendLine(p, "127.0.1.1\t"+name)
}

// ensurePython makes `python` python3 for the whole desktop (a terminal's
// shell too, not only OSWorld's commands), as on OSWorld's VMs: a link in
// /usr/local/bin unless the system has a python.
func ensurePython(root string) error {
	for _, p := range []string{"usr/local/bin/python", "usr/bin/python"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			return nil
		}
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/python3")); err != nil {
		return nil // no python3: nothing to point at
	}
	link := filepath.Join(root, "usr/local/bin/python")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("python: %w", err)
	}
	if err := os.Symlink("/usr/bin/python3", link); err != nil && !os.IsExist(err) {
		return fmt.Errorf("python: %w", err)
	}
	return nil
}
