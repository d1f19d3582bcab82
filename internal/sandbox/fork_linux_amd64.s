#include "textflag.h"

// func cloneVM(stackTop uintptr, a *vforkArgs) (pid uintptr, errno uintptr)
//
// clone(CLONE_VM|CLONE_VFORK|SIGCHLD) onto a stack of the caller's: the
// child shares the caller's memory and runs vforkChild(a) on that stack
// while the caller is suspended, until the child execs or exits. It saves
// copying the page tables of a process that is a copy of tine.
TEXT ·cloneVM(SB),NOSPLIT,$0-32
	MOVQ	stackTop+0(FP), SI
	MOVQ	a+8(FP), R12
	MOVQ	$0x4111, DI	// CLONE_VM|CLONE_VFORK|SIGCHLD
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$56, AX	// SYS_clone
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$0, pid+16(FP)
	NEGQ	AX
	MOVQ	AX, errno+24(FP)
	RET
ok:
	MOVQ	AX, pid+16(FP)
	MOVQ	$0, errno+24(FP)
	RET
child:
	// On the new stack: call vforkChild(a); it never returns. The call is
	// indirect so the linker's nosplit check, which cannot know the child
	// runs on a stack of its own, does not add its frames to the caller's.
	SUBQ	$16, SP
	MOVQ	R12, 0(SP)
	MOVQ	$·vforkChild(SB), AX
	CALL	AX
	MOVQ	$127, DI
	MOVQ	$231, AX	// SYS_exit_group
	SYSCALL
	RET
