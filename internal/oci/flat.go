package oci

// tine-runc's image directory holds regular files only, no directory:
// containerd 2.x's CRI plugin (the kubelet's checkpoint API) untars the
// shim's images into one flat directory, creating each entry as a file,
// and hands that directory back for a restore, so anything below a
// directory would be lost ("tmpfs/shm: not a directory"). The memory
// tier's layout (internal/checkpoint: manifest.json, criu.kdat, tree-N/
// of criu images, tmpfs/ with the sandbox's tmpfs trees) is flattened:
// tree-0's images at the top, where checkpointctl and crit look for
// criu's images; tree-N's (N >= 1) named "tree-N.IMAGE"; the tmpfs trees
// as one tar file. A restore rebuilds the layout next to them.

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

const (
	// tmpfsTar holds the tier's tmpfs/ directory.
	tmpfsTar = "tmpfs.tar"
	// stageName is the directory, inside the image directory, where the
	// tier's layout is made during a checkpoint or a restore.
	stageName = ".tine-stage"
)

// tierFiles are the tier's own files at the top of its layout, kept so.
var tierFiles = map[string]bool{"manifest.json": true, "criu.kdat": true}

// flatten moves the tier's layout in stage into the flat directory dst.
func flatten(stage, dst string) error {
	entries, err := os.ReadDir(stage)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == "tmpfs" && e.IsDir():
			if err := writeTreeTar(filepath.Join(stage, name), filepath.Join(dst, tmpfsTar)); err != nil {
				return fmt.Errorf("pack the sandbox's tmpfs trees: %w", err)
			}
		case strings.HasPrefix(name, "tree-") && e.IsDir():
			prefix := name + "."
			if name == "tree-0" {
				prefix = ""
			}
			images, err := os.ReadDir(filepath.Join(stage, name))
			if err != nil {
				return err
			}
			for _, img := range images {
				flat := prefix + img.Name()
				if !img.Type().IsRegular() || tierFiles[flat] || flat == tmpfsTar || flat == imageName || (prefix == "" && strings.HasPrefix(flat, "tree-")) {
					return fmt.Errorf("criu's %s/%s cannot be kept in a flat image directory", name, img.Name())
				}
				if err := os.Rename(filepath.Join(stage, name, img.Name()), filepath.Join(dst, flat)); err != nil {
					return err
				}
			}
		case tierFiles[name] && e.Type().IsRegular():
			if err := os.Rename(filepath.Join(stage, name), filepath.Join(dst, name)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("the checkpoint's %s has no place in a flat image directory", name)
		}
	}
	return nil
}

// unflatten rebuilds the tier's layout from the flat directory src in
// stage (new): hard links where it can, copies where not.
func unflatten(src, stage string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.Mkdir(stage, 0o700); err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if name == stageName || name == imageName {
			continue
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s in %s is no regular file: not an image directory tine-runc wrote", name, src)
		}
		var to string
		switch tree, image, ok := strings.Cut(name, "."); {
		case name == tmpfsTar:
			if err := readTreeTar(filepath.Join(src, name), filepath.Join(stage, "tmpfs")); err != nil {
				return fmt.Errorf("unpack the sandbox's tmpfs trees: %w", err)
			}
			continue
		case tierFiles[name]:
			to = name
		case ok && strings.HasPrefix(tree, "tree-"):
			to = filepath.Join(tree, image)
		default:
			to = filepath.Join("tree-0", name)
		}
		to = filepath.Join(stage, to)
		if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
			return err
		}
		if err := linkOrCopy(filepath.Join(src, name), to); err != nil {
			return err
		}
	}
	return nil
}

func linkOrCopy(from, to string) error {
	if os.Link(from, to) == nil {
		return nil
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeTreeTar writes the tree at dir (directories, regular files and
// symlinks, with their modes, owners and times) as a tar file at path.
func writeTreeTar(dir, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			return fmt.Errorf("%s is a %s, which tine-runc's checkpoint does not carry", p, fi.Mode().Type())
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, _ = filepath.Rel(dir, p)
		h.Uname, h.Gname = "", ""
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.CopyN(tw, in, h.Size)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// readTreeTar unpacks what writeTreeTar wrote into dir (new). The file
// comes with the checkpoint (a kubelet's archive, say): an entry that
// would land outside dir — absolute, climbing, or below a symlink it made
// — is refused.
func readTreeTar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	links := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == "." || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("entry %q: outside the tree", h.Name)
		}
		for p := filepath.Dir(name); p != "."; p = filepath.Dir(p) {
			if links[p] {
				return fmt.Errorf("entry %q: below the symlink %s", h.Name, p)
			}
		}
		to := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.Mkdir(to, 0o700)
		case tar.TypeReg:
			var out *os.File
			if out, err = os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600); err == nil {
				_, err = io.Copy(out, tr)
				if cerr := out.Close(); err == nil {
					err = cerr
				}
			}
		case tar.TypeSymlink:
			links[name] = true
			err = os.Symlink(h.Linkname, to)
		default:
			err = fmt.Errorf("type %c is not carried", h.Typeflag)
		}
		if err == nil {
			err = os.Lchown(to, h.Uid, h.Gid)
		}
		if err == nil && h.Typeflag != tar.TypeSymlink {
			if err = os.Chmod(to, fs.FileMode(h.Mode).Perm()|modeBits(h.Mode)); err == nil {
				err = os.Chtimes(to, h.ModTime, h.ModTime)
			}
		}
		if err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
	}
}

// modeBits are the setuid, setgid and sticky bits of a tar mode.
func modeBits(mode int64) fs.FileMode {
	var m fs.FileMode
	if mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}
