package sandbox

import (
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The os view is made in a layer of its own (stage/view) before the
// overlay is mounted, stacked just over the base: /root (on every host,
// and not the operating system's) is an opaque empty directory there; the
// full view has no such entries, and hides /root with a tmpfs as before.
func TestPlanHostViewInItsLayer(t *testing.T) {
	p, err := NewPlan(&Spec{Args: []string{"true"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	overlay := stepIndex(p, func(s Step) bool { return s.FSType == "overlay" })
	root := stepIndex(p, func(s Step) bool { return s.Kind == StepUpper && s.Target == p.Stage+"/view/root" })
	if root < 0 || overlay < 0 || root > overlay {
		t.Fatalf("os view: /root in the view layer at %d, overlay at %d; want it before", root, overlay)
	}
	if data := p.Steps[overlay].Data; !strings.Contains(data, "lowerdir="+p.Stage+"/view:/,") {
		t.Fatalf("overlay %q: want the view layer just over the base", data)
	}
	if st := p.Steps[root]; st.Data != "trusted.overlay.opaque" || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("os view: /root is %+v, want an opaque directory", st)
	}
	full, err := NewPlan(&Spec{Args: []string{"true"}, HostView: HostViewFull}, false)
	if err != nil {
		t.Fatal(err)
	}
	if i := stepIndex(full, func(s Step) bool { return s.Kind == StepUpper && s.Data != "" }); i >= 0 {
		t.Fatalf("full view hides %s in the upper layer", full.Steps[i].Target)
	}
	if stepIndex(full, func(s Step) bool { return s.FSType == "tmpfs" && s.Target == full.Root+"/root" }) < 0 {
		t.Fatal("full view: no tmpfs over /root")
	}
	if _, err := NewPlan(&Spec{Args: []string{"true"}, HostView: "some"}, false); err == nil {
		t.Fatal("an unknown host view was accepted")
	}
}

// A cached view is stale once a directory it read changes, and after
// hostViewTTL.
func TestHostViewCacheStaleness(t *testing.T) {
	dir := t.TempDir()
	sc := &hostViewScan{Built: time.Now(), Dirs: map[string]int64{dir: dirCtime(dir)}}
	if !sc.fresh() {
		t.Fatal("a scan of an unchanged directory is stale")
	}
	if err := os.WriteFile(dir+"/new.key", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if sc.fresh() {
		t.Fatal("a file added to a scanned directory left the scan fresh")
	}
	sc = &hostViewScan{Built: time.Now().Add(-hostViewTTL - time.Second), Dirs: map[string]int64{dir: dirCtime(dir)}}
	if sc.fresh() {
		t.Fatal("a scan older than hostViewTTL is fresh")
	}
}

// The cache file reads back as the scan that was written.
func TestHostViewCacheRoundTrip(t *testing.T) {
	saved := hostViewCacheFile
	hostViewCacheFile = t.TempDir() + "/hostview"
	t.Cleanup(func() { hostViewCacheFile = saved })
	sc := &hostViewScan{Built: time.Unix(0, time.Now().UnixNano()), Perms: true,
		Dirs: map[string]int64{"/etc": 42, "/etc/with space": 7},
		Entries: []viewEntry{
			{Path: "/etc/ssl/private", Mode: unix.S_IFDIR | 0o710, GID: 104, Hide: true},
			{Path: "/var/mail", Mode: unix.S_IFDIR | unix.S_ISGID | 0o775, GID: 8},
			{Path: "/etc/a b.key", Mode: unix.S_IFREG | 0o600, UID: 5, Hide: true},
		}}
	writeHostViewCache(sc)
	got := readHostViewCache()
	if got == nil || !got.Built.Equal(sc.Built) || !reflect.DeepEqual(got.Dirs, sc.Dirs) || !reflect.DeepEqual(got.Entries, sc.Entries) {
		t.Fatalf("read back %+v, wrote %+v", got, sc)
	}
}

// A stack of layers whose overlay options outgrow a mount's page is
// refused with a clear error at plan time (mount(2) would cut the options
// mid-path); one that fits is planned.
func TestPlanRefusesAStackTooDeepToMount(t *testing.T) {
	layers := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, "/var/lib/tine/store/layers/"+strings.Repeat("ab", 32)[:60]+strconv.Itoa(1000+i))
		}
		return out
	}
	if _, err := NewPlan(&Spec{Args: []string{"true"}, RootFS: "/", Layers: layers(30)}, false); err != nil {
		t.Fatalf("30 layers: %v", err)
	}
	_, err := NewPlan(&Spec{Args: []string{"true"}, RootFS: "/", Layers: layers(50)}, false)
	if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "too many to mount") {
		t.Fatalf("50 layers: %v, want a clear invalid-spec error", err)
	}
}
