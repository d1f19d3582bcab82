package hostimage

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Wheel writes a pure-Python wheel of package name (one module,
// name/__init__.py holding src) into dir, for pip to install offline, and
// returns its path.
func Wheel(dir, name, version, src string) (string, error) {
	info := name + "-" + version + ".dist-info"
	files := []struct{ path, body string }{
		{name + "/__init__.py", src},
		{info + "/METADATA", "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n"},
		{info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: tine\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	for _, f := range files {
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.path, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(info + "/RECORD,,\n")
	files = append(files, struct{ path, body string }{info + "/RECORD", record.String()})
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(dir, name+"-"+version+"-py3-none-any.whl")
	out, err := os.Create(p)
	if err != nil {
		return "", err
	}
	defer out.Close()
	zw := zip.NewWriter(out)
	for _, f := range files {
		w, err := zw.Create(f.path)
		if err != nil {
			return "", err
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			return "", err
		}
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return p, out.Close()
}
