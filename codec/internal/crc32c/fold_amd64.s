//go:build amd64 && !noasm

#include "textflag.h"

// REDUCE folds 128-bit lane a into b, b into c and c into d (128 bits
// apart: k holds the constants; X4 is scratch), then reduces d with the
// CRC32 instruction from 0 into AX.
#define REDUCE(a, b, c, d, k) \
	MOVO a, X4; \
	PCLMULQDQ $0x00, k, a; \
	PCLMULQDQ $0x11, k, X4; \
	PXOR X4, a; \
	PXOR a, b; \
	MOVO b, X4; \
	PCLMULQDQ $0x00, k, b; \
	PCLMULQDQ $0x11, k, X4; \
	PXOR X4, b; \
	PXOR b, c; \
	MOVO c, X4; \
	PCLMULQDQ $0x00, k, c; \
	PCLMULQDQ $0x11, k, X4; \
	PXOR X4, c; \
	PXOR c, d; \
	XORL AX, AX; \
	MOVQ d, BX; \
	CRC32Q BX, AX; \
	PEXTRQ $1, d, BX; \
	CRC32Q BX, AX

// func fold64(r uint32, p *byte, n int, k *[4]uint64) uint32
//
// The raw CRC-32C from state r of n >= 1 blocks of 64 bytes at p: four
// 128-bit lanes X0-X3 hold the first block (r XORed into its first four
// bytes); each later block is folded in, each lane moved 512 bits on by
// two carry-less products with k[0] (its first 8 bytes, the high-degree
// half) and k[1] (its last 8), then XORed with the lane's new 16 bytes.
// The lanes are folded into X3 the same way with k[2] and k[3] (128 bits
// apart), and X3's 16 bytes reduced with the CRC32 instruction from 0.
TEXT ·fold64(SB), NOSPLIT, $0-36
	MOVL r+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), DX
	MOVOU 0(DX), X8
	MOVOU 16(DX), X9
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVQ AX, X4
	PXOR X4, X0
	ADDQ $64, SI
	DECQ CX
	JZ reduce

loop:
	MOVO X0, X4
	MOVO X1, X5
	MOVO X2, X6
	MOVO X3, X7
	PCLMULQDQ $0x00, X8, X0
	PCLMULQDQ $0x11, X8, X4
	PCLMULQDQ $0x00, X8, X1
	PCLMULQDQ $0x11, X8, X5
	PCLMULQDQ $0x00, X8, X2
	PCLMULQDQ $0x11, X8, X6
	PCLMULQDQ $0x00, X8, X3
	PCLMULQDQ $0x11, X8, X7
	MOVOU 0(SI), X10
	MOVOU 16(SI), X11
	MOVOU 32(SI), X12
	MOVOU 48(SI), X13
	PXOR X4, X0
	PXOR X5, X1
	PXOR X6, X2
	PXOR X7, X3
	PXOR X10, X0
	PXOR X11, X1
	PXOR X12, X2
	PXOR X13, X3
	ADDQ $64, SI
	DECQ CX
	JNZ loop

reduce:
	REDUCE(X0, X1, X2, X3, X9)
	MOVL AX, ret+32(FP)
	RET

// func fold256(r uint32, p *byte, n int, k *[6]uint64) uint32
//
// fold64 four times as wide: the lanes are the 16 128-bit lanes of
// Z0-Z3, which hold the first 256 bytes (r XORed into the first four);
// each later block is folded in, every lane moved 2048 bits on by
// VPCLMULQDQ with k[0] and k[1] in each 128-bit lane of Z8, and XORed
// with its new 16 bytes (VPTERNLOGQ $0x96 is a three-way XOR). Z0 is then
// folded into Z1, Z1 into Z2 and Z2 into Z3 (512 bits apart: k[2], k[3]),
// and Z3's four lanes, which hold the last 64 bytes' worth, are reduced as
// fold64 reduces X0-X3 (k[4], k[5]).
TEXT ·fold256(SB), NOSPLIT, $0-36
	MOVL r+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), DX
	VMOVQ AX, X4
	VBROADCASTI32X4 0(DX), Z8
	VBROADCASTI32X4 16(DX), Z9
	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VPXORQ Z4, Z0, Z0
	ADDQ $256, SI
	DECQ CX
	JZ reduce256

loop256:
	VPCLMULQDQ $0x00, Z8, Z0, Z4
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPCLMULQDQ $0x00, Z8, Z1, Z5
	VPCLMULQDQ $0x11, Z8, Z1, Z1
	VPCLMULQDQ $0x00, Z8, Z2, Z6
	VPCLMULQDQ $0x11, Z8, Z2, Z2
	VPCLMULQDQ $0x00, Z8, Z3, Z7
	VPCLMULQDQ $0x11, Z8, Z3, Z3
	VPTERNLOGQ $0x96, 0(SI), Z4, Z0
	VPTERNLOGQ $0x96, 64(SI), Z5, Z1
	VPTERNLOGQ $0x96, 128(SI), Z6, Z2
	VPTERNLOGQ $0x96, 192(SI), Z7, Z3
	ADDQ $256, SI
	DECQ CX
	JNZ loop256

reduce256:
	// Z0 into Z1, Z1 into Z2, Z2 into Z3.
	VPCLMULQDQ $0x00, Z9, Z0, Z4
	VPCLMULQDQ $0x11, Z9, Z0, Z0
	VPTERNLOGQ $0x96, Z4, Z0, Z1
	VPCLMULQDQ $0x00, Z9, Z1, Z4
	VPCLMULQDQ $0x11, Z9, Z1, Z1
	VPTERNLOGQ $0x96, Z4, Z1, Z2
	VPCLMULQDQ $0x00, Z9, Z2, Z4
	VPCLMULQDQ $0x11, Z9, Z2, Z2
	VPTERNLOGQ $0x96, Z4, Z2, Z3
	// Z3's lanes 1-3 into X1, X2, X5 (lane 0 is X3); then SSE code.
	VEXTRACTI32X4 $1, Z3, X1
	VEXTRACTI32X4 $2, Z3, X2
	VEXTRACTI32X4 $3, Z3, X5
	VZEROUPPER
	MOVOU 32(DX), X9
	REDUCE(X3, X1, X2, X5, X9)
	MOVL AX, ret+32(FP)
	RET
