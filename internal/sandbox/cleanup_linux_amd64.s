#include "textflag.h"

// func cloneCleanup(stackTop uintptr, c *cleanupProgram) (errno uintptr)
//
// clone(CLONE_VM|SIGCHLD) onto a stack of the caller's: the child shares
// the caller's memory (a process of its own, not a thread) and runs
// cleanupMain(c) on that stack; the caller goes on at once.
TEXT ·cloneCleanup(SB),NOSPLIT,$0-24
	MOVQ	stackTop+0(FP), SI
	MOVQ	c+8(FP), R12
	MOVQ	$0x111, DI	// CLONE_VM|SIGCHLD
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$56, AX	// SYS_clone
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	NEGQ	AX
	MOVQ	AX, errno+16(FP)
	RET
ok:
	MOVQ	$0, errno+16(FP)
	RET
child:
	// On the new stack: call cleanupMain(c); it never returns. Indirect,
	// as in cloneVM, so the linker's nosplit check does not count the
	// child's frames against the caller's stack.
	SUBQ	$16, SP
	MOVQ	R12, 0(SP)
	MOVQ	$·cleanupMain(SB), AX
	CALL	AX
	MOVQ	$0, DI
	MOVQ	$231, AX	// SYS_exit_group
	SYSCALL
	RET
