//go:build !cgo

#include "textflag.h"

// func enterResident(stackTop, tls uintptr, r *resident)
//
// Points the thread's FS base at tls, switches to the stack at stackTop
// and calls residentMain(r), which never returns: PID 1 leaves the
// goroutine stack and thread-local storage it was cloned with, which lie
// in the memory residentMain unmaps.
TEXT ·enterResident(SB),NOSPLIT,$0-24
	MOVQ	$158, AX	// SYS_arch_prctl
	MOVQ	$0x1002, DI	// ARCH_SET_FS
	MOVQ	tls+8(FP), SI
	SYSCALL
	MOVQ	stackTop+0(FP), SI
	MOVQ	r+16(FP), R12
	MOVQ	SI, SP
	SUBQ	$16, SP
	MOVQ	R12, 0(SP)
	// Indirect, as in cloneVM: the nosplit check must not add
	// residentMain's frames to the caller's stack.
	MOVQ	$·residentMain(SB), AX
	CALL	AX
	MOVQ	$1, DI
	MOVQ	$231, AX	// SYS_exit_group
	SYSCALL
	RET
