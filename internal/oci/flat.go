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
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/tine-run/tine/internal/inroot"
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

// writeTreeTar writes the tree at dir (directories, regular files, hard
// links and symlinks, with their modes, owners and times) as a tar file at
// path.
func writeTreeTar(dir, path string) error {
	root, err := inroot.Open(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := root.WriteTar("/", f); err != nil {
		return err
	}
	return f.Close()
}

// readTreeTar unpacks what writeTreeTar wrote into dir (new), owners
// included. The file comes with the checkpoint (a kubelet's archive, say):
// every entry resolves inside dir, whatever its name or the symlinks it
// made.
func readTreeTar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	root, err := inroot.Open(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.ExtractTar("/", f, math.MaxInt64, inroot.ArchiveOwner, inroot.ArchiveOwner)
}
