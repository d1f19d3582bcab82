package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A live sandbox's PID 1 is a copy of tine (ADR 0001), and it lives as
// long as the sandbox. Every page of the daemon it was cloned from stays
// shared only until the daemon writes it (its garbage collector rewrites
// its heap all the time); then PID 1 holds the old page alone. An idle
// sandbox so came to cost about 1.9 MiB, most of it copies of a daemon
// heap that PID 1 never reads. So what PID 1 needs to serve launches — its
// buffers, the command's vfork stack and a stack of its own — lives in a
// mapping outside Go's heap (resident), and before it serves, PID 1 unmaps
// every other writable mapping of the copy (ADR 0014).

// residentStackSize is PID 1's own stack while it serves: its nosplit
// frames need a few hundred bytes.
const residentStackSize = 32 << 10

// residentMaxUnmap bounds the ranges PID 1 unmaps; past it the rest stay
// mapped (costing memory, not correctness).
const residentMaxUnmap = 1024

// resident is the memory a live sandbox's PID 1 keeps.
type resident struct {
	launch     launchState
	vfork      vforkArgs
	vforkStack [vforkStackSize]byte
	stack      [residentStackSize]byte
	// tls is what the thread pointer points into once the copy is gone:
	// compiled Go reloads its g register from there after every call to
	// assembly, and the thread's own TLS was in the unmapped runtime.
	tls    [16]uintptr
	nunmap int
	unmap  [residentMaxUnmap]struct{ addr, len uintptr }
}

// residentMem is a resident's mapping, in the parent.
type residentMem []byte

// newResident maps a resident and points its buffers at each other, and
// lists what PID 1 is to unmap: every writable private mapping of this
// process but the resident itself and the kernel's (vdso, vvar, the main
// stack). Mappings made after the listing stay in PID 1's copy.
func newResident() (*resident, residentMem, error) {
	size := (int(unsafe.Sizeof(resident{})) + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("map PID 1's memory: %w", err)
	}
	r := (*resident)(unsafe.Pointer(&mem[0]))
	r.launch.prepare()
	r.vfork.launch = &r.launch
	r.vfork.stack = &r.vforkStack
	own := [2]uintptr{uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&mem[0])) + uintptr(size)}
	maps, err := os.ReadFile("/proc/self/maps")
	if err == nil {
		r.nunmap = writableRanges(maps, own, r.unmap[:])
	}
	return r, mem, nil
}

// release unmaps the parent's copy; PID 1 has its own.
func (m residentMem) release() {
	if m != nil {
		unix.Munmap(m)
	}
}

// writableRanges puts into out the writable private mappings listed in
// maps (/proc/self/maps), less the range keep and the kernel's mappings,
// and returns how many it put.
func writableRanges(maps []byte, keep [2]uintptr, out []struct{ addr, len uintptr }) int {
	n := 0
	add := func(lo, hi uintptr) {
		if lo < hi && n < len(out) {
			out[n].addr, out[n].len = lo, hi-lo
			n++
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// start-end perms offset dev inode [path]
		f := bytes.Fields(sc.Bytes())
		if len(f) < 5 || len(f[1]) < 4 || f[1][1] != 'w' || f[1][3] != 'p' {
			continue
		}
		if len(f) >= 6 && f[5][0] == '[' && !bytes.Equal(f[5], []byte("[heap]")) {
			continue // [stack], [vdso], [vvar], [vsyscall]
		}
		lo, hi, ok := parseRange(f[0])
		if !ok {
			continue
		}
		// The resident may sit inside a merged mapping: keep it out.
		add(lo, min(hi, max(lo, keep[0])))
		add(max(lo, min(hi, keep[1])), hi)
	}
	return n
}

func parseRange(b []byte) (lo, hi uintptr, ok bool) {
	a, z, found := bytes.Cut(b, []byte("-"))
	if !found {
		return 0, 0, false
	}
	l, err1 := strconv.ParseUint(string(a), 16, 64)
	h, err2 := strconv.ParseUint(string(z), 16, 64)
	return uintptr(l), uintptr(h), err1 == nil && err2 == nil && l < h
}

// residentMain is a live sandbox's PID 1 once on its own stack: it drops
// the rest of its copy of tine and serves. It never returns.
//
//go:nosplit
//go:norace
func residentMain(r *resident) {
	for i := 0; i < r.nunmap && i < residentMaxUnmap; i++ {
		unix.RawSyscall(unix.SYS_MUNMAP, r.unmap[i].addr, r.unmap[i].len, 0)
	}
	serve(&r.launch, &r.vfork)
}
