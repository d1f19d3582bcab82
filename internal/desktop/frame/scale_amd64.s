//go:build amd64 && !purego

#include "textflag.h"

// The two passes of Scaler.Scale for AVX2 (scale_amd64.go says what each
// computes; scale.go has the portable Go versions, which give the same
// bytes). Hand-written because the Go compiler does not vectorise: this
// is the hot loop of every scaled screenshot (ADR 0022).

// Words of 128: rounding before >> 8.
DATA round16<>+0(SB)/8, $0x0080008000800080
DATA round16<>+8(SB)/8, $0x0080008000800080
DATA round16<>+16(SB)/8, $0x0080008000800080
DATA round16<>+24(SB)/8, $0x0080008000800080
GLOBL round16<>(SB), RODATA|NOPTR, $32

// Doublewords of 128.
DATA round32<>+0(SB)/8, $0x0000008000000080
DATA round32<>+8(SB)/8, $0x0000008000000080
DATA round32<>+16(SB)/8, $0x0000008000000080
DATA round32<>+24(SB)/8, $0x0000008000000080
GLOBL round32<>(SB), RODATA|NOPTR, $32

// Keeps blue, green and red of each pixel; zeroes the padding byte.
DATA colour<>+0(SB)/8, $0x00ffffff00ffffff
DATA colour<>+8(SB)/8, $0x00ffffff00ffffff
DATA colour<>+16(SB)/8, $0x00ffffff00ffffff
DATA colour<>+24(SB)/8, $0x00ffffff00ffffff
GLOBL colour<>(SB), RODATA|NOPTR, $32

// PSHUFB mask: a pair of pixels a, b (8 bytes) becomes the channels side
// by side, a.b b.b a.g b.g a.r b.r a.x b.x, for PMADDWD.
DATA interleave<>+0(SB)/8, $0x0703060205010400
DATA interleave<>+8(SB)/8, $0x0f0b0e0a0d090c08
DATA interleave<>+16(SB)/8, $0x0703060205010400
DATA interleave<>+24(SB)/8, $0x0f0b0e0a0d090c08
GLOBL interleave<>(SB), RODATA|NOPTR, $32

// func vblendAVX2(dst, src *byte, stride int, w *uint16, taps, chunks int)
TEXT ·vblendAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), R8
	MOVQ w+24(FP), R9
	MOVQ taps+32(FP), R10
	MOVQ chunks+40(FP), CX
	VMOVDQU round16<>(SB), Y13
	VMOVDQU colour<>(SB), Y12
	CMPQ R10, $2
	JEQ two

	// Any number of taps: the weights are read again for every chunk.
chunk:
	TESTQ CX, CX
	JZ done
	VPXOR Y0, Y0, Y0
	MOVQ SI, R11
	MOVQ R9, R12
	MOVQ R10, R13

tap:
	VPMOVZXBW (R11), Y1
	VPBROADCASTW (R12), Y2
	VPMULLW Y2, Y1, Y1
	VPADDW Y1, Y0, Y0
	ADDQ R8, R11
	ADDQ $2, R12
	DECQ R13
	JNZ tap
	VPADDW Y13, Y0, Y0
	VPSRLW $8, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSWB X1, X0, X0
	VPAND X12, X0, X0
	VMOVDQU X0, (DI)
	ADDQ $16, SI
	ADDQ $16, DI
	DECQ CX
	JMP chunk

	// Two taps (every ratio under 2 but a few rows): weights in registers;
	// eight pixels a step, then four.
two:
	VPBROADCASTW 0(R9), Y10
	VPBROADCASTW 2(R9), Y11
	LEAQ (SI)(R8*1), R11

pair8:
	CMPQ CX, $2
	JLT pair
	VPMOVZXBW (SI), Y0
	VPMOVZXBW 16(SI), Y2
	VPMOVZXBW (R11), Y1
	VPMOVZXBW 16(R11), Y3
	VPMULLW Y10, Y0, Y0
	VPMULLW Y10, Y2, Y2
	VPMULLW Y11, Y1, Y1
	VPMULLW Y11, Y3, Y3
	VPADDW Y1, Y0, Y0
	VPADDW Y3, Y2, Y2
	VPADDW Y13, Y0, Y0
	VPADDW Y13, Y2, Y2
	VPSRLW $8, Y0, Y0
	VPSRLW $8, Y2, Y2
	VPACKUSWB Y2, Y0, Y0 // quadwords: pixels 0–1, 4–5 | 2–3, 6–7
	VPERMQ $0xd8, Y0, Y0
	VPAND Y12, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, R11
	ADDQ $32, DI
	SUBQ $2, CX
	JMP pair8

pair:
	TESTQ CX, CX
	JZ done
	VPMOVZXBW (SI), Y0
	VPMOVZXBW (R11), Y1
	VPMULLW Y10, Y0, Y0
	VPMULLW Y11, Y1, Y1
	VPADDW Y1, Y0, Y0
	VPADDW Y13, Y0, Y0
	VPSRLW $8, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSWB X1, X0, X0
	VPAND X12, X0, X0
	VMOVDQU X0, (DI)
	ADDQ $16, SI
	ADDQ $16, R11
	ADDQ $16, DI
	DECQ CX
	JMP pair

done:
	VZEROUPPER
	RET

// func hblend2AVX2(dst, col *byte, c0 int, starts *int, w, w0, w1 *uint16, groups int)
//
// Four output pixels per round, eight when two rounds in a row have
// consecutive sources (starts s, s+1, s+2, s+3: every group of a 5:4
// reduction): then the two taps are two overlapping loads and 16-bit
// multiplies, as in vblendAVX2.
// Otherwise the pixel pairs are gathered: those of outputs 0 and 2 to the
// low lane, 1 and 3 to the high one, so each PMADDWD takes the weights of
// two consecutive outputs as they lie in memory.
TEXT ·hblend2AVX2(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ col+8(FP), SI
	MOVQ c0+16(FP), AX
	SHLQ $2, AX
	SUBQ AX, SI // SI + 4*start is the start'th source pixel
	MOVQ starts+24(FP), BX
	MOVQ w+32(FP), DX
	MOVQ w0+40(FP), R13
	MOVQ w1+48(FP), R14
	MOVQ groups+56(FP), CX
	VMOVDQU interleave<>(SB), Y15
	VPXOR Y14, Y14, Y14
	VMOVDQU round32<>(SB), Y13
	VMOVDQU round16<>(SB), Y12

group:
	TESTQ CX, CX
	JZ hdone
	MOVQ 0(BX), R8
	MOVQ 24(BX), R11
	LEAQ 3(R8), R12
	CMPQ R11, R12
	JNE gather
	CMPQ CX, $2
	JLT single
	MOVQ 32(BX), R9
	MOVQ 56(BX), R10
	LEAQ 3(R9), R12
	CMPQ R10, R12
	JNE single

	// Two consecutive groups: eight outputs, packed and stored at once.
	VPMOVZXBW (SI)(R8*4), Y0
	VPMOVZXBW 4(SI)(R8*4), Y1
	VPMOVZXBW (SI)(R9*4), Y2
	VPMOVZXBW 4(SI)(R9*4), Y3
	VPMULLW (R13), Y0, Y0
	VPMULLW (R14), Y1, Y1
	VPMULLW 32(R13), Y2, Y2
	VPMULLW 32(R14), Y3, Y3
	VPADDW Y1, Y0, Y0
	VPADDW Y3, Y2, Y2
	VPADDW Y12, Y0, Y0
	VPADDW Y12, Y2, Y2
	VPSRLW $8, Y0, Y0
	VPSRLW $8, Y2, Y2
	VPACKUSWB Y2, Y0, Y0 // quadwords: outputs 0–1, 4–5 | 2–3, 6–7
	VPERMQ $0xd8, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $64, BX
	ADDQ $128, DX
	ADDQ $64, R13
	ADDQ $64, R14
	ADDQ $32, DI
	SUBQ $2, CX
	JMP group

single:
	VPMOVZXBW (SI)(R8*4), Y0
	VPMOVZXBW 4(SI)(R8*4), Y1
	VPMULLW (R13), Y0, Y0
	VPMULLW (R14), Y1, Y1
	VPADDW Y1, Y0, Y0
	VPADDW Y12, Y0, Y0
	VPSRLW $8, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSWB X1, X0, X0
	VMOVDQU X0, (DI)
	JMP next

gather:
	MOVQ 8(BX), R9
	MOVQ 16(BX), R10
	VMOVQ (SI)(R8*4), X0
	VPINSRQ $1, (SI)(R10*4), X0, X0
	VMOVQ (SI)(R9*4), X1
	VPINSRQ $1, (SI)(R11*4), X1, X1
	VINSERTI128 $1, X1, Y0, Y0
	VPSHUFB Y15, Y0, Y0
	VPUNPCKLBW Y14, Y0, Y1 // outputs 0 | 1, channels as words
	VPUNPCKHBW Y14, Y0, Y2 // outputs 2 | 3
	VPMADDWD 0(DX), Y1, Y1
	VPMADDWD 32(DX), Y2, Y2
	VPADDD Y13, Y1, Y1
	VPADDD Y13, Y2, Y2
	VPSRLD $8, Y1, Y1
	VPSRLD $8, Y2, Y2
	VPACKUSDW Y2, Y1, Y1 // words: 0, 2 | 1, 3
	VEXTRACTI128 $1, Y1, X2
	VPACKUSWB X2, X1, X1 // bytes: 0, 2, 1, 3
	VPSHUFD $0xd8, X1, X1
	VMOVDQU X1, (DI)

next:
	ADDQ $32, BX
	ADDQ $64, DX
	ADDQ $32, R13
	ADDQ $32, R14
	ADDQ $16, DI
	DECQ CX
	JMP group

hdone:
	VZEROUPPER
	RET
