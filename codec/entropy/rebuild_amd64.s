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

// SPLIT_LOAD loads a group of 32 BF16 values (64 bytes at SI, low byte
// first) and leaves their low bytes in Y4 and high bytes in Y7, Y10 being
// the word mask 0x00FF. VPACKUSWB packs within 128-bit halves, so the
// quadwords of Y4 and Y7 hold values 0-7, 16-23, 8-15, 24-31; SPLIT_STORE
// puts them in order and writes them to DI.
#define SPLIT_LOAD \
	VMOVDQU (SI), Y0; \
	VMOVDQU 32(SI), Y1; \
	VPAND Y10, Y0, Y2; \
	VPAND Y10, Y1, Y3; \
	VPACKUSWB Y3, Y2, Y4; \
	VPSRLW $8, Y0, Y5; \
	VPSRLW $8, Y1, Y6; \
	VPACKUSWB Y6, Y5, Y7

#define SPLIT_STORE(R) \
	VPERMQ $0xD8, R, R; \
	VMOVDQU R, (DI); \
	ADDQ $64, SI; \
	ADDQ $32, DI

// func splitExponentsAVX2(dst, raw *byte, groups int)
//
// Per group of 32 values, with lo and hi their low and high bytes, the
// exponent (hi << 1) | (lo >> 7) of each into 32 bytes of dst.
TEXT ·splitExponentsAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ raw+8(FP), SI
	MOVQ groups+16(FP), CX
	MOVQ $0x00FF00FF00FF00FF, R8
	MOVQ R8, X10
	VPBROADCASTQ X10, Y10
	MOVQ $0x0101010101010101, R8
	MOVQ R8, X11
	VPBROADCASTQ X11, Y11

eloop:
	TESTQ CX, CX
	JZ edone
	SPLIT_LOAD
	VPADDB Y7, Y7, Y8
	VPSRLW $7, Y4, Y9
	VPAND Y11, Y9, Y9
	VPOR Y9, Y8, Y8
	SPLIT_STORE(Y8)
	DECQ CX
	JMP eloop

edone:
	VZEROUPPER
	RET

// func splitOthersAVX2(dst, raw *byte, groups int)
//
// As splitExponentsAVX2, the other bits (hi & 0x80) | (lo & 0x7F) of each
// value: its sign and 7 bits of mantissa.
TEXT ·splitOthersAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ raw+8(FP), SI
	MOVQ groups+16(FP), CX
	MOVQ $0x00FF00FF00FF00FF, R8
	MOVQ R8, X10
	VPBROADCASTQ X10, Y10
	MOVQ $0x7F7F7F7F7F7F7F7F, R8
	MOVQ R8, X11
	VPBROADCASTQ X11, Y11
	VPCMPEQB Y12, Y12, Y12
	VPXOR Y11, Y12, Y12

oloop:
	TESTQ CX, CX
	JZ odone
	SPLIT_LOAD
	VPAND Y12, Y7, Y8
	VPAND Y11, Y4, Y9
	VPOR Y9, Y8, Y8
	SPLIT_STORE(Y8)
	DECQ CX
	JMP oloop

odone:
	VZEROUPPER
	RET
