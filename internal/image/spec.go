package image

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/tine-run/tine/internal/sandbox"
	"golang.org/x/sys/unix"
)

// ApplyOptions say what the caller set itself, which the image's config
// does not override.
type ApplyOptions struct {
	// OneShot: s runs a command (tine run), so the image's Entrypoint and
	// Cmd apply; a live sandbox's commands come later, through exec.
	OneShot bool
	// WorkdirSet: --workdir was given.
	WorkdirSet bool
}

// Apply makes img the root of s and honours its config: the bottom layer
// is the base and the others are stacked over it, under any layers s
// already has (a snapshot's); the image's Env comes before s's own (which
// win); Entrypoint is prepended to the command, and Cmd is the command
// when none is given; WorkingDir is the working directory unless one was
// set; User (a name or uid, with an optional ":group") is looked up in
// the image's /etc/passwd and /etc/group.
func (img *Image) Apply(s *sandbox.Spec, o ApplyOptions) error {
	if s.UserNS {
		// Its whiteouts and opaque directories are trusted.overlay.*
		// xattrs, which an overlay mounted in a user namespace ignores.
		return fmt.Errorf("%w: an image root needs root without --userns (a user namespace's overlay would not apply the layers' deletions)", sandbox.ErrInvalidSpec)
	}
	cfg := img.Record.Config
	// The overlay takes its lower directories in one mount option, which
	// must fit a page: the image's bottom layers are merged as needed.
	paths := img.Paths
	if over := lowerBytes(s.Layers) + lowerBytes(paths); over > maxLowerBytes {
		if img.store == nil {
			return fmt.Errorf("%w: image %s stacks %d layers (%d bytes of overlay options, at most %d): too many to mount", sandbox.ErrInvalidSpec, img.Ref, len(s.Layers)+len(paths), over, maxLowerBytes)
		}
		var err error
		if paths, err = img.store.flattenToFit(img, s.Layers); err != nil {
			return fmt.Errorf("%w: %v", sandbox.ErrInvalidSpec, err)
		}
	}
	s.RootFS = paths[len(paths)-1]
	s.Layers = append(s.Layers, paths[:len(paths)-1]...)
	s.Env = append(append([]string(nil), cfg.Env...), s.Env...)
	if o.OneShot {
		args := s.Args
		if len(args) == 0 {
			args = cfg.Cmd
		}
		s.Args = append(append([]string(nil), cfg.Entrypoint...), args...)
		if len(s.Args) == 0 {
			return fmt.Errorf("%w: image %s has neither Entrypoint nor Cmd: give a command", sandbox.ErrInvalidSpec, img.Ref)
		}
	}
	if !o.WorkdirSet && cfg.WorkingDir != "" {
		s.Workdir = cfg.WorkingDir
	}
	if cfg.User != "" && s.User == nil {
		u, home, err := img.lookupUser(cfg.User)
		if err != nil {
			return fmt.Errorf("%w: image %s: USER %q: %v", sandbox.ErrInvalidSpec, img.Ref, cfg.User, err)
		}
		if u.UID != 0 || u.GID != 0 || len(u.Groups) > 0 {
			s.User = u
		}
		if home != "" && !hasKey(s.Env, "HOME") {
			s.Env = append([]string{"HOME=" + home}, s.Env...)
		}
	}
	return nil
}

func hasKey(env []string, key string) bool {
	for _, e := range env {
		if k, _, _ := strings.Cut(e, "="); k == key {
			return true
		}
	}
	return false
}

// lookupUser resolves USER as Docker does: "name" or "uid", optionally
// ":group" or ":gid". A name needs the image's /etc/passwd; a uid alone
// gets the passwd entry's group when there is one, else its own number.
func (img *Image) lookupUser(spec string) (*sandbox.User, string, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	passwd, _ := img.readFile("etc/passwd")
	group, _ := img.readFile("etc/group")
	u := &sandbox.User{}
	var name, home string
	found := false
	if n, err := strconv.ParseUint(userPart, 10, 32); err == nil {
		u.UID, u.GID = uint32(n), uint32(n)
		for _, f := range records(passwd, 7) {
			if f[2] == userPart {
				name, home, found = f[0], f[5], true
				if g, err := strconv.ParseUint(f[3], 10, 32); err == nil {
					u.GID = uint32(g)
				}
				break
			}
		}
	} else {
		for _, f := range records(passwd, 7) {
			if f[0] == userPart {
				uid, err1 := strconv.ParseUint(f[2], 10, 32)
				gid, err2 := strconv.ParseUint(f[3], 10, 32)
				if err1 != nil || err2 != nil {
					return nil, "", fmt.Errorf("the image's /etc/passwd entry for %s has no numeric ids", userPart)
				}
				u.UID, u.GID, name, home, found = uint32(uid), uint32(gid), f[0], f[5], true
				break
			}
		}
		if !found {
			return nil, "", fmt.Errorf("no user %s in the image's /etc/passwd", userPart)
		}
	}
	if hasGroup {
		if n, err := strconv.ParseUint(groupPart, 10, 32); err == nil {
			u.GID = uint32(n)
		} else {
			ok := false
			for _, f := range records(group, 4) {
				if f[0] == groupPart {
					if g, err := strconv.ParseUint(f[2], 10, 32); err == nil {
						u.GID, ok = uint32(g), true
					}
					break
				}
			}
			if !ok {
				return nil, "", fmt.Errorf("no group %s in the image's /etc/group", groupPart)
			}
		}
	}
	if name != "" {
		for _, f := range records(group, 4) {
			for _, m := range strings.Split(f[3], ",") {
				if m == name {
					if g, err := strconv.ParseUint(f[2], 10, 32); err == nil && uint32(g) != u.GID {
						u.Groups = append(u.Groups, uint32(g))
					}
				}
			}
		}
	}
	return u, home, nil
}

// records splits a colon-separated database into lines of n fields.
func records(b []byte, n int) [][]string {
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Split(line, ":"); len(f) >= n {
			out = append(out, f)
		}
	}
	return out
}

// readFile reads rel (e.g. "etc/passwd") as the image's merged root shows
// it: from the topmost layer that has it, stopping at a whiteout or an
// opaque directory. It follows no symlink, in the path or at its end: a
// layer's symlink means something inside the sandbox, not on the host.
func (img *Image) readFile(rel string) ([]byte, error) {
	for _, layer := range img.Paths {
		b, err := readBeneath(layer, rel)
		switch {
		case err == nil:
			return b, nil
		case errors.Is(err, errWhiteout):
			return nil, err
		}
		if opaqueOnTheWay(layer, rel) {
			break
		}
	}
	return nil, unix.ENOENT
}

var errWhiteout = errors.New("deleted by a whiteout")

func readBeneath(layer, rel string) ([]byte, error) {
	dir, err := unix.Open(layer, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOTDIR) {
		return nil, errWhiteout // a parent is a file or a whiteout here: hidden below
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			return nil, errWhiteout
		}
		return nil, unix.EINVAL
	case unix.S_IFREG:
	default:
		return nil, unix.EINVAL
	}
	if st.Size > 4<<20 {
		return nil, unix.EFBIG
	}
	b := make([]byte, st.Size)
	n, err := unix.Pread(fd, b, 0)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}

func opaqueOnTheWay(layer, rel string) bool {
	buf := make([]byte, 1)
	for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
		if n, err := unix.Lgetxattr(path.Join(layer, d), "trusted.overlay.opaque", buf); err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}
