//go:build amd64 && !noasm

#include "textflag.h"

// func rebuildBF16AVX2(dst, syms, others *byte, groups int)
//
// Per group of 16 values, e the exponent symbols and s the other bits
// (sign in bit 7, mantissa below): the high byte of each value is
// (s & 0x80) | (e >> 1) and the low byte (s & 0x7F) | (e << 7 & 0x80),
// interleaved low byte first.
TEXT ·rebuildBF16AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ syms+8(FP), DX
	MOVQ others+16(FP), SI
	MOVQ groups+24(FP), CX
	MOVQ $0x7F7F7F7F7F7F7F7F, R8
	MOVQ R8, X10
	VPBROADCASTQ X10, X10
	VPCMPEQB X11, X11, X11
	VPXOR X10, X11, X11

loop:
	TESTQ CX, CX
	JZ done
	VMOVDQU (SI), X0
	VMOVDQU (DX), X4
	VPSRLW $1, X4, X5
	VPAND X10, X5, X5
	VPAND X11, X0, X6
	VPOR X5, X6, X6
	VPSLLW $7, X4, X7
	VPAND X11, X7, X7
	VPAND X10, X0, X12
	VPOR X7, X12, X12
	VPUNPCKLBW X6, X12, X13
	VPUNPCKHBW X6, X12, X14
	VMOVDQU X13, (DI)
	VMOVDQU X14, 16(DI)
	ADDQ $16, SI
	ADDQ $16, DX
	ADDQ $32, DI
	DECQ CX
	JMP loop

done:
	RET
