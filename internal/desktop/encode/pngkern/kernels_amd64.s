//go:build amd64 && !purego

#include "textflag.h"

// AVX2 kernels of the PNG writer (kernels_amd64.go says what each computes;
// encode/png.go has the portable Go code, which gives the same bytes). Every
// lossless screenshot runs them over each of its rows: in Go, the row
// filter and Adler-32 were half of a 1280x800 PNG's CPU (ADR 0010).

// VPSHUFB mask, per 128-bit lane: four BGRX pixels become four RGB
// pixels (12 bytes), then four zero bytes.
DATA rgbPack<>+0(SB)/8, $0x090a040506000102
DATA rgbPack<>+8(SB)/8, $0x808080800c0d0e08
DATA rgbPack<>+16(SB)/8, $0x090a040506000102
DATA rgbPack<>+24(SB)/8, $0x808080800c0d0e08
GLOBL rgbPack<>(SB), RODATA|NOPTR, $32

// The weights of a 32-byte block's bytes in Adler-32's second sum:
// 32 for the first byte down to 1 for the last.
DATA adlerTaps<>+0(SB)/8, $0x191a1b1c1d1e1f20
DATA adlerTaps<>+8(SB)/8, $0x1112131415161718
DATA adlerTaps<>+16(SB)/8, $0x090a0b0c0d0e0f10
DATA adlerTaps<>+24(SB)/8, $0x0102030405060708
GLOBL adlerTaps<>(SB), RODATA|NOPTR, $32

DATA ones16<>+0(SB)/8, $0x0001000100010001
DATA ones16<>+8(SB)/8, $0x0001000100010001
DATA ones16<>+16(SB)/8, $0x0001000100010001
DATA ones16<>+24(SB)/8, $0x0001000100010001
GLOBL ones16<>(SB), RODATA|NOPTR, $32

// func filterUpAVX2(out, cur, prev *byte, groups int)
TEXT ·filterUpAVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ cur+8(FP), SI
	MOVQ prev+16(FP), DX
	MOVQ groups+24(FP), CX
	VMOVDQU rgbPack<>(SB), Y2

up:
	VMOVDQU (SI), Y0
	VPSUBB  (DX), Y0, Y0
	VPSHUFB Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VMOVDQU X0, (DI)
	VMOVDQU X1, 12(DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $24, DI
	DECQ CX
	JNZ  up
	VZEROUPPER
	RET

// func filterNoneAVX2(out, cur *byte, groups int)
TEXT ·filterNoneAVX2(SB), NOSPLIT, $0-24
	MOVQ out+0(FP), DI
	MOVQ cur+8(FP), SI
	MOVQ groups+16(FP), CX
	VMOVDQU rgbPack<>(SB), Y2

none:
	VMOVDQU (SI), Y0
	VPSHUFB Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VMOVDQU X0, (DI)
	VMOVDQU X1, 12(DI)
	ADDQ $32, SI
	ADDQ $24, DI
	DECQ CX
	JNZ  none
	VZEROUPPER
	RET

// func adlerBlocksAVX2(s1, s2 uint32, p *byte, blocks int) (r1, r2 uint32)
//
// Per 32-byte block b: s2 += 32·s1 + Σ (32−i)·b[i], s1 += Σ b[i]. The
// 32·s1 terms are summed as ps (the s1 before each block) and shifted in
// at the end. Unreduced: the caller keeps blocks·32 within zlib's NMAX.
TEXT ·adlerBlocksAVX2(SB), NOSPLIT, $0-32
	MOVL s1+0(FP), AX
	MOVL s2+4(FP), BX
	MOVQ p+8(FP), SI
	MOVQ blocks+16(FP), CX
	MOVQ CX, DX
	IMULQ AX, DX           // the incoming s1, once per block
	VMOVD DX, X3           // ps
	VMOVD BX, X4           // s2
	VPXOR Y5, Y5, Y5       // s1 of the bytes so far
	VPXOR Y6, Y6, Y6
	VMOVDQU adlerTaps<>(SB), Y7
	VMOVDQU ones16<>(SB), Y8

block:
	VMOVDQU (SI), Y0
	VPADDD  Y5, Y3, Y3
	VPSADBW Y6, Y0, Y1     // byte sums of each 8 bytes
	VPADDD  Y1, Y5, Y5
	VPMADDUBSW Y7, Y0, Y2  // bytes × taps, pairs summed into words
	VPMADDWD Y8, Y2, Y2    // pairs of words summed into doublewords
	VPADDD  Y2, Y4, Y4
	ADDQ $32, SI
	DECQ CX
	JNZ  block

	VPSLLD $5, Y3, Y3
	VPADDD Y3, Y4, Y4

	VEXTRACTI128 $1, Y5, X1
	VPADDD X1, X5, X5
	VPSHUFD $0x4e, X5, X1
	VPADDD X1, X5, X5
	VPSHUFD $0xb1, X5, X1
	VPADDD X1, X5, X5
	VMOVD X5, DX
	ADDL DX, AX

	VEXTRACTI128 $1, Y4, X1
	VPADDD X1, X4, X4
	VPSHUFD $0x4e, X4, X1
	VPADDD X1, X4, X4
	VPSHUFD $0xb1, X4, X1
	VPADDD X1, X4, X4
	VMOVD X4, BX

	VZEROUPPER
	MOVL AX, r1+24(FP)
	MOVL BX, r2+28(FP)
	RET
