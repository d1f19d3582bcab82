package envd

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/sys/unix"
)

// File metadata (envd 0.6.2): X-Metadata-<key> headers of an upload,
// stored as the file's user.e2b.<key> extended attributes, so they stay
// with the file (pause and fork keep them: test/e2b) and the sandbox can
// read them too.
// Header names are case-insensitive, so keys are kept in lower case.
const xattrPrefix = "user.e2b."

const metadataHeader = "X-Metadata-"

// metadataOf is the X-Metadata-* headers of r.
func metadataOf(h http.Header) map[string]string {
	var md map[string]string
	for k, vs := range h {
		if key, ok := strings.CutPrefix(http.CanonicalHeaderKey(k), metadataHeader); ok && key != "" && len(vs) > 0 {
			if md == nil {
				md = map[string]string{}
			}
			md[strings.ToLower(key)] = vs[0]
		}
	}
	return md
}

// setMetadata stores md on path.
func setMetadata(path string, md map[string]string) error {
	for k, v := range md {
		if err := unix.Lsetxattr(path, xattrPrefix+k, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return fmt.Errorf("file metadata needs user extended attributes, which this filesystem lacks: %w", err)
			}
			return fmt.Errorf("set metadata %q on %s: %w", k, path, err)
		}
	}
	return nil
}

// readMetadata is path's user.e2b.* attributes (nil for none, or where
// the filesystem has no xattrs).
func readMetadata(path string) map[string]string {
	size, err := unix.Llistxattr(path, nil)
	if err != nil || size == 0 {
		return nil
	}
	buf := make([]byte, size)
	if size, err = unix.Llistxattr(path, buf); err != nil {
		return nil
	}
	var md map[string]string
	for _, name := range bytes.Split(buf[:size], []byte{0}) {
		key, ok := strings.CutPrefix(string(name), xattrPrefix)
		if !ok || key == "" {
			continue
		}
		val := make([]byte, 4096)
		n, err := unix.Lgetxattr(path, string(name), val)
		if err != nil {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = string(val[:n])
	}
	return md
}
