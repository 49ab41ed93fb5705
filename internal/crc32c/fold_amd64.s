//go:build amd64 && !noasm

#include "textflag.h"

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
	// X0 into X1, X1 into X2, X2 into X3.
	MOVO X0, X4
	PCLMULQDQ $0x00, X9, X0
	PCLMULQDQ $0x11, X9, X4
	PXOR X4, X0
	PXOR X0, X1
	MOVO X1, X4
	PCLMULQDQ $0x00, X9, X1
	PCLMULQDQ $0x11, X9, X4
	PXOR X4, X1
	PXOR X1, X2
	MOVO X2, X4
	PCLMULQDQ $0x00, X9, X2
	PCLMULQDQ $0x11, X9, X4
	PXOR X4, X2
	PXOR X2, X3
	XORL AX, AX
	MOVQ X3, BX
	CRC32Q BX, AX
	PEXTRQ $1, X3, BX
	CRC32Q BX, AX
	MOVL AX, ret+32(FP)
	RET
