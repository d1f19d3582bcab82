package policy

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// These tests run the shipped program in x/net/bpf's interpreter and compare
// every verdict with the policy evaluated directly in Go.

const (
	allow = unix.SECCOMP_RET_ALLOW
	eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
)

// filterVM runs a seccomp program on a syscall.
type filterVM struct{ vm *bpf.VM }

func newFilterVM(t *testing.T, prog []unix.SockFilter) filterVM {
	t.Helper()
	raw := make([]bpf.RawInstruction, len(prog))
	for i, f := range prog {
		raw[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("program has instructions the interpreter does not know")
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	return filterVM{vm}
}

// run lays out struct seccomp_data as a little-endian kernel would; the
// interpreter reads 32-bit words big-endian, so each word is written so.
func (f filterVM) run(t *testing.T, auditArch, nr uint32, args [6]uint64) uint32 {
	t.Helper()
	in := make([]byte, 64)
	binary.BigEndian.PutUint32(in[nrOffset:], nr)
	binary.BigEndian.PutUint32(in[archOffset:], auditArch)
	for i, a := range args {
		binary.BigEndian.PutUint32(in[argsOffset+8*i:], uint32(a))
		binary.BigEndian.PutUint32(in[argsOffset+8*i+4:], uint32(a>>32))
	}
	ret, err := f.vm.Run(in)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(ret)
}

// verdict is the reference semantics of a decision table.
func (p table) verdict(nr uint32, args [6]uint64) uint32 {
	d, ok := p.syscalls[nr]
	if !ok {
		return p.defaultAction
	}
	for _, r := range d.rules {
		if r.holds(args) {
			return r.action
		}
	}
	return d.fallback
}

func (r rule) holds(args [6]uint64) bool {
	for _, c := range r.conds {
		if !c.holds(args[c.arg]) {
			return false
		}
	}
	return true
}

func (c cond) holds(a uint64) bool {
	switch c.op {
	case specs.OpEqualTo:
		return a == c.value
	case specs.OpNotEqual:
		return a != c.value
	case specs.OpLessThan:
		return a < c.value
	case specs.OpLessEqual:
		return a <= c.value
	case specs.OpGreaterThan:
		return a > c.value
	case specs.OpGreaterEqual:
		return a >= c.value
	case specs.OpMaskedEqual:
		return a&c.value == c.valueTwo
	}
	panic(c.op)
}

// probeValues are argument values around v, including ones that differ only
// in the high half.
func probeValues(v uint64) []uint64 {
	return []uint64{v, v - 1, v + 1, v ^ 1<<32, v | 1<<32, v &^ (1<<32 - 1), v | 1<<32 - 1, ^v, 0, ^uint64(0)}
}

func testedPolicy(t *testing.T, mode string) (table, *arch.Info) {
	t.Helper()
	profile, err := profileFor(mode)
	if err != nil {
		t.Fatal(err)
	}
	a, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	p, err := translate(profile, a)
	if err != nil {
		t.Fatal(err)
	}
	return p, a
}

func TestProgramMatchesPolicy(t *testing.T) {
	for _, mode := range []string{Default, Strict} {
		t.Run(mode, func(t *testing.T) {
			p, a := testedPolicy(t, mode)
			c, err := compile(mode) // seccomp's generated programs are checked against these
			if err != nil {
				t.Fatal(err)
			}
			prog, err := toSockFilter(c.program)
			if err != nil {
				t.Fatal(err)
			}
			vm := newFilterVM(t, prog)
			checked := 0
			check := func(nr uint32, args [6]uint64) {
				t.Helper()
				checked++
				if got, want := vm.run(t, uint32(a.ID), nr, args), p.verdict(nr, args); got != want {
					t.Fatalf("syscall %d %s args %#x: program says %#x, policy %#x", nr, a.SyscallNumbers[int(nr)], args, got, want)
				}
			}
			for nr := uint32(0); nr < 1024; nr++ {
				check(nr, [6]uint64{})
				d := p.syscalls[nr]
				if d == nil {
					continue
				}
				for _, r := range d.rules {
					for _, c := range r.conds {
						values := append(probeValues(c.value), probeValues(c.valueTwo)...)
						// A filter that compared the syscall number against a
						// leftover argument would go wrong for some of these.
						for v := uint64(0); v < 1024; v++ {
							values = append(values, v)
						}
						for _, v := range values {
							var args [6]uint64
							args[c.arg] = v
							check(nr, args)
						}
					}
				}
			}
			t.Logf("%d instructions, %d syscalls checked", len(prog), checked)
		})
	}
}

func TestForeignABIsAreRefused(t *testing.T) {
	prog, err := Compile(Default)
	if err != nil {
		t.Fatal(err)
	}
	vm := newFilterVM(t, prog)
	a, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	getpid := uint32(a.SyscallNames["getpid"])
	if got := vm.run(t, uint32(a.ID), getpid, [6]uint64{}); got != allow {
		t.Fatalf("native getpid: got %#x, want allow: the negative checks below would prove nothing", got)
	}
	// int 0x80 from a 64-bit process: i386 numbers, i386 audit arch.
	for _, foreign := range []*arch.Info{arch.I386, arch.ARM} {
		if foreign.ID == a.ID {
			continue
		}
		for nr := range uint32(512) {
			if got := vm.run(t, uint32(foreign.ID), nr, [6]uint64{}); got != eperm {
				t.Fatalf("%s syscall %d: got %#x, want EPERM", foreign.Name, nr, got)
			}
		}
	}
	if a == arch.X86_64 {
		want := unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		if got := vm.run(t, uint32(a.ID), x32Bit|getpid, [6]uint64{}); got != want {
			t.Fatalf("x32 getpid: got %#x, want ENOSYS", got)
		}
	}
}

// Each comparison, on values that straddle the 32-bit halves.
func TestComparisons(t *testing.T) {
	const v = 0x1_0000_0005
	conds := []cond{
		{op: specs.OpEqualTo, value: v},
		{op: specs.OpNotEqual, value: v},
		{op: specs.OpLessThan, value: v},
		{op: specs.OpLessEqual, value: v},
		{op: specs.OpGreaterThan, value: v},
		{op: specs.OpGreaterEqual, value: v},
		{op: specs.OpMaskedEqual, value: 0xf0_0000_00f0, valueTwo: 0x10_0000_0010},
		{op: specs.OpMaskedEqual, value: 0xffffffff, valueTwo: unix.TIOCSTI},
	}
	a, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conds {
		for _, arg := range []uint32{0, 3, 5} {
			c.arg = arg
			t.Run(fmt.Sprintf("%s/arg%d", c.op, arg), func(t *testing.T) {
				p := table{defaultAction: eperm, syscalls: map[uint32]*decision{
					7: {rules: []rule{{conds: []cond{c}, action: allow}}, fallback: eperm},
				}}
				insts, err := assemble(p, a)
				if err != nil {
					t.Fatal(err)
				}
				prog, err := toSockFilter(insts)
				if err != nil {
					t.Fatal(err)
				}
				vm := newFilterVM(t, prog)
				values := append(probeValues(v), 0x10_0000_0010, 0x1f_0000_001f, 0x10_0000_0000, unix.TIOCSTI, 1<<32|unix.TIOCSTI)
				for _, x := range values {
					var args [6]uint64
					args[arg] = x
					want := eperm
					if c.holds(x) {
						want = allow
					}
					if got := vm.run(t, uint32(a.ID), 7, args); got != want {
						t.Errorf("%s %#x with arg %#x: got %#x, want %#x", c.op, c.value, x, got, want)
					}
				}
			})
		}
	}
}

// A long first half of the search needs the two-instruction jump.
func TestLongJumps(t *testing.T) {
	a, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	long := &decision{fallback: eperm}
	for i := range uint64(100) {
		long.rules = append(long.rules, rule{conds: []cond{{op: specs.OpEqualTo, value: i * 3}}, action: allow})
	}
	p := table{defaultAction: eperm, syscalls: map[uint32]*decision{
		1: long, 2: {fallback: allow}, 3: {fallback: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
	}}
	insts, err := assemble(p, a)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := toSockFilter(insts)
	if err != nil {
		t.Fatal(err)
	}
	vm := newFilterVM(t, prog)
	for nr := range uint32(6) {
		for _, x := range []uint64{0, 1, 3, 297, 298, 300} {
			args := [6]uint64{x}
			if got, want := vm.run(t, uint32(a.ID), nr, args), p.verdict(nr, args); got != want {
				t.Errorf("syscall %d arg %d: got %#x, want %#x", nr, x, got, want)
			}
		}
	}
}
