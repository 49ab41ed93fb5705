//go:build amd64 && !noasm

#include "textflag.h"

// func decodeAVX2(out, sm, nib *byte, groups int, table *Codebook)
//
// Per group of 16 values: codes = interleave(nib & 0x0F, nib >> 4);
// e = table[codes] (VPSHUFB); the high byte of each value is
// (s & 0x80) | (e >> 1) and the low byte (s & 0x7F) | (e << 7 & 0x80).
TEXT ·decodeAVX2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ sm+8(FP), SI
	MOVQ nib+16(FP), DX
	MOVQ groups+24(FP), CX
	MOVQ table+32(FP), AX
	VMOVDQU (AX), X8
	MOVQ $0x0F0F0F0F0F0F0F0F, R8
	MOVQ R8, X9
	VPBROADCASTQ X9, X9
	MOVQ $0x7F7F7F7F7F7F7F7F, R8
	MOVQ R8, X10
	VPBROADCASTQ X10, X10
	VPCMPEQB X11, X11, X11
	VPXOR X10, X11, X11

loop:
	TESTQ CX, CX
	JZ done
	VMOVDQU (SI), X0
	VMOVQ (DX), X1
	VPAND X9, X1, X2
	VPSRLW $4, X1, X3
	VPAND X9, X3, X3
	VPUNPCKLBW X3, X2, X2
	VPSHUFB X2, X8, X4
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
	ADDQ $8, DX
	ADDQ $32, DI
	DECQ CX
	JMP loop

done:
	RET
