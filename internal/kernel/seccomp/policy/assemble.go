package policy

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/elastic/go-seccomp-bpf/arch"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Offsets into struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}.
const (
	nrOffset   = 0
	archOffset = 4
	argsOffset = 16
)

// x32Bit marks the syscall numbers of the x32 ABI on x86_64.
const x32Bit = 0x40000000

// maxSkip is the farthest a conditional jump can go in classic BPF.
const maxSkip = 255

// assemble lays out p as a classic BPF program for architecture a:
//
//	load arch: a foreign ABI (i386 by int 0x80 on x86_64) gets the default action
//	load nr: on x86_64, x32 syscalls get ENOSYS
//	binary search on nr over ranges of numbers with the same verdict; a
//	leaf returns its verdict, or compares arguments and then returns.
//
// Every path that loads an argument ends in a return, so a syscall number is
// never compared against a stale argument left in the accumulator.
func assemble(p table, a *arch.Info) ([]bpf.Instruction, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, fmt.Errorf("%s is big-endian, argument offsets assume little-endian", a.Name)
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.ID), SkipTrue: 1},
		bpf.RetConstant{Val: p.defaultAction},
		bpf.LoadAbsolute{Off: nrOffset, Size: 4},
	}
	if a == arch.X86_64 {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1},
			bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		)
	}
	prog = append(prog, search(verdictRanges(p))...)
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("program has %d instructions, the kernel takes at most %d", len(prog), unix.BPF_MAXINSNS)
	}
	return prog, nil
}

// verdictRange is a run of syscall numbers, from first up to the next
// range's first, that the policy treats alike.
type verdictRange struct {
	first uint32
	code  []bpf.Instruction // every path ends in a return
}

// verdictRanges covers all syscall numbers, merging neighbours that get the
// same unconditional verdict.
func verdictRanges(p table) []verdictRange {
	var out []verdictRange
	add := func(first uint32, code []bpf.Instruction) {
		if n := len(out); n > 0 && len(code) == 1 && len(out[n-1].code) == 1 && out[n-1].code[0] == code[0] {
			return
		}
		out = append(out, verdictRange{first: first, code: code})
	}
	next := uint32(0)
	for _, nr := range slices.Sorted(maps.Keys(p.syscalls)) {
		if nr > next {
			add(next, []bpf.Instruction{bpf.RetConstant{Val: p.defaultAction}})
		}
		add(nr, decisionCode(p.syscalls[nr]))
		next = nr + 1
	}
	add(next, []bpf.Instruction{bpf.RetConstant{Val: p.defaultAction}})
	return out
}

// search finds the range holding the syscall number in the accumulator by
// binary search, and runs that range's code.
func search(rs []verdictRange) []bpf.Instruction {
	if len(rs) == 1 {
		return rs[0].code
	}
	mid := len(rs) / 2
	below, above := search(rs[:mid]), search(rs[mid:])
	var code []bpf.Instruction
	if len(below) <= maxSkip {
		code = append(code, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: rs[mid].first, SkipTrue: uint8(len(below))})
	} else {
		code = append(code,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: rs[mid].first, SkipFalse: 1},
			bpf.Jump{Skip: uint32(len(below))},
		)
	}
	return append(append(code, below...), above...)
}

// decisionCode returns the action of d's first matching rule, else d's fallback.
func decisionCode(d *decision) []bpf.Instruction {
	var code []bpf.Instruction
	for _, r := range d.rules {
		code = append(code, ruleCode(r)...)
	}
	return append(code, bpf.RetConstant{Val: d.fallback})
}

// ruleCode returns r's action when all its conditions hold and falls through
// otherwise. It is built back to front so that each comparison knows how far
// it is to the end. A rule has at most six comparisons of six instructions,
// so every skip fits in a conditional jump.
func ruleCode(r rule) []bpf.Instruction {
	code := []bpf.Instruction{bpf.RetConstant{Val: r.action}}
	for i := len(r.conds) - 1; i >= 0; i-- {
		code = append(condCode(r.conds[i], len(code)), code...)
	}
	return code
}

// condCode falls through when c holds and otherwise skips the rest
// instructions that follow it. The 64-bit argument is compared as two 32-bit
// halves, the high one first.
func condCode(c cond, rest int) []bpf.Instruction {
	hi := bpf.LoadAbsolute{Off: argsOffset + 8*c.arg + 4, Size: 4}
	lo := bpf.LoadAbsolute{Off: argsOffset + 8*c.arg, Size: 4}
	vhi, vlo := uint32(c.value>>32), uint32(c.value)
	fail := uint8(rest)
	switch c.op {
	case specs.OpEqualTo:
		return []bpf.Instruction{hi, jeq(vhi, 0, 2+fail), lo, jeq(vlo, 0, fail)}
	case specs.OpNotEqual:
		return []bpf.Instruction{hi, jeq(vhi, 0, 2), lo, jeq(vlo, fail, 0)}
	case specs.OpGreaterThan: // hi > vhi, or hi == vhi and lo > vlo
		return []bpf.Instruction{hi, jgt(vhi, 3, 0), jeq(vhi, 0, 2+fail), lo, jgt(vlo, 0, fail)}
	case specs.OpGreaterEqual:
		return []bpf.Instruction{hi, jgt(vhi, 3, 0), jeq(vhi, 0, 2+fail), lo, jge(vlo, 0, fail)}
	case specs.OpLessThan: // hi < vhi, or hi == vhi and lo < vlo
		return []bpf.Instruction{hi, jge(vhi, 0, 3), jeq(vhi, 0, 2+fail), lo, jge(vlo, fail, 0)}
	case specs.OpLessEqual:
		return []bpf.Instruction{hi, jge(vhi, 0, 3), jeq(vhi, 0, 2+fail), lo, jgt(vlo, fail, 0)}
	case specs.OpMaskedEqual: // arg & value == valueTwo
		mhi, mlo := uint32(c.value>>32), uint32(c.value)
		whi, wlo := uint32(c.valueTwo>>32), uint32(c.valueTwo)
		return []bpf.Instruction{hi, and(mhi), jeq(whi, 0, 3+fail), lo, and(mlo), jeq(wlo, 0, fail)}
	}
	panic(fmt.Sprintf("seccomp: comparison %s was not checked by conditions", c.op))
}

func jeq(v uint32, t, f uint8) bpf.Instruction {
	return bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: t, SkipFalse: f}
}

func jgt(v uint32, t, f uint8) bpf.Instruction {
	return bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: v, SkipTrue: t, SkipFalse: f}
}

func jge(v uint32, t, f uint8) bpf.Instruction {
	return bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: v, SkipTrue: t, SkipFalse: f}
}

func and(v uint32) bpf.Instruction {
	return bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: v}
}
