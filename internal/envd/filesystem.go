package envd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"connectrpc.com/connect"
)

// filesystem is envd's filesystem service over the sandbox's own files.
type filesystem struct {
	env *environment

	mu       sync.Mutex
	watchers map[string]*watcher
}

// fsError maps an OS error onto the Connect code the SDKs turn into their
// error classes (not_found → NotFoundError, already_exists → false from
// makeDir, ...).
func fsError(op, path string, err error) error {
	code := connect.CodeInternal
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code = connect.CodeNotFound
	case errors.Is(err, fs.ErrExist):
		code = connect.CodeAlreadyExists
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		code = connect.CodePermissionDenied
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL):
		code = connect.CodeInvalidArgument
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		code = connect.CodeResourceExhausted
	}
	// The message names the path once: the SDK's caller gave it.
	cause := err
	var pe *fs.PathError
	var le *os.LinkError
	if errors.As(err, &pe) {
		cause = pe.Err
	} else if errors.As(err, &le) {
		cause = le.Err
	}
	return connect.NewError(code, fmt.Errorf("%s %s: %w", op, path, cause))
}

var (
	namesMu sync.Mutex
	names   = map[string]string{}
)

// nameOf is a uid's or gid's name from the sandbox's /etc, else the number.
func nameOf(kind string, id uint32) string {
	key := kind + strconv.FormatUint(uint64(id), 10)
	namesMu.Lock()
	defer namesMu.Unlock()
	if n, ok := names[key]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(id), 10)
	if kind == "u" {
		if u, err := user.LookupId(n); err == nil {
			n = u.Username
		}
	} else if g, err := user.LookupGroupId(n); err == nil {
		n = g.Name
	}
	names[key] = n
	return n
}

// entryOf describes path without following a final symlink.
func entryOf(path string) (*EntryInfo, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	return entryFromInfo(path, st), nil
}

func entryFromInfo(path string, st fs.FileInfo) *EntryInfo {
	e := &EntryInfo{
		Name:         st.Name(),
		Path:         path,
		Size:         st.Size(),
		Mode:         uint32(st.Mode().Perm()),
		Permissions:  st.Mode().String(),
		ModifiedTime: st.ModTime().UTC(),
	}
	if path == "/" {
		e.Name = "/"
	}
	switch {
	case st.Mode().IsDir():
		e.Type = FileTypeDirectory
	case st.Mode()&fs.ModeSymlink != 0:
		e.Type = FileTypeSymlink
		if target, err := os.Readlink(path); err == nil {
			e.SymlinkTarget = &target
		}
	default:
		e.Type = FileTypeFile
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		e.Owner, e.Group = nameOf("u", sys.Uid), nameOf("g", sys.Gid)
	}
	e.Metadata = readMetadata(path)
	return e
}

func (f *filesystem) Stat(_ context.Context, req *connect.Request[PathRequest]) (*connect.Response[EntryResponse], error) {
	p := f.env.resolve(req.Msg.Path)
	e, err := entryOf(p)
	if err != nil {
		return nil, fsError("stat", p, err)
	}
	return connect.NewResponse(&EntryResponse{Entry: e}), nil
}

func (f *filesystem) MakeDir(_ context.Context, req *connect.Request[PathRequest]) (*connect.Response[EntryResponse], error) {
	p := f.env.resolve(req.Msg.Path)
	if st, err := os.Stat(p); err == nil {
		if st.IsDir() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory %s already exists", p))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s exists and is not a directory", p))
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return nil, fsError("make directory", p, err)
	}
	e, err := entryOf(p)
	if err != nil {
		return nil, fsError("stat", p, err)
	}
	return connect.NewResponse(&EntryResponse{Entry: e}), nil
}

func (f *filesystem) Move(_ context.Context, req *connect.Request[MoveRequest]) (*connect.Response[EntryResponse], error) {
	src, dst := f.env.resolve(req.Msg.Source), f.env.resolve(req.Msg.Destination)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return nil, fsError("make directory", filepath.Dir(dst), err)
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, fsError("move", src, err)
	}
	e, err := entryOf(dst)
	if err != nil {
		return nil, fsError("stat", dst, err)
	}
	return connect.NewResponse(&EntryResponse{Entry: e}), nil
}

func (f *filesystem) ListDir(_ context.Context, req *connect.Request[ListDirRequest]) (*connect.Response[ListDirResponse], error) {
	p := f.env.resolve(req.Msg.Path)
	depth := max(int(req.Msg.Depth), 1)
	st, err := os.Stat(p)
	if err != nil {
		return nil, fsError("list", p, err)
	}
	if !st.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", p))
	}
	out := &ListDirResponse{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, de := range ents {
			full := filepath.Join(dir, de.Name())
			info, err := de.Info()
			if err != nil {
				continue // gone since the read
			}
			out.Entries = append(out.Entries, entryFromInfo(full, info))
			if de.IsDir() && level < depth {
				if err := walk(full, level+1); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		return nil, fsError("list", p, err)
	}
	return connect.NewResponse(out), nil
}

func (f *filesystem) Remove(_ context.Context, req *connect.Request[PathRequest]) (*connect.Response[Empty], error) {
	p := f.env.resolve(req.Msg.Path)
	if _, err := os.Lstat(p); err != nil {
		return nil, fsError("remove", p, err)
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, fsError("remove", p, err)
	}
	return connect.NewResponse(&Empty{}), nil
}
