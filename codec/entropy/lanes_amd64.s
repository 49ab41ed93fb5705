//go:build amd64 && !noasm

#include "textflag.h"

// func laneSteps4Asm(mt *multiTable, pad, lanes *byte, s *laneQuad) bool
//
// The loop of laneSteps4 (multi.go) for four lanes at once: while every
// lane k has q[k] <= end[k] and j[k] <= lim, each makes four
// lookups of the multi-symbol table from the 64 bits of pad at bit q[k],
// storing each entry's four low bytes at lane k's symbol j[k] and moving
// j[k] by its symbol count and q[k] by its bits. It returns false at an
// entry of no code (0). Lane k's buffer is lanes + k*528 (laneStride),
// and its last start of a step lanes + k*528 + lim (s.lim, at 96).
//
// Registers: R8 mt, R9 pad, R10-R13 q[0..3], SI DI R14 R15 lane k's next
// symbol as an address, AX the window, BX an entry, CX a shift, DX spare;
// more-8(SP) whether a lane stepped in the loop after the first.

// LOOKUP takes one entry from the top 12 bits of AX for the lane of bit
// Q and symbol address P.
#define LOOKUP(Q, P) \
	MOVQ AX, DX; \
	SHRQ $52, DX; \
	MOVL (R8)(DX*4), BX; \
	TESTL BX, BX; \
	JZ bad; \
	MOVL BX, (P); \
	MOVL BX, CX; \
	SHRL $26, CX; \
	SHLQ CX, AX; \
	ADDQ CX, Q; \
	SHRL $24, BX; \
	ANDL $3, BX; \
	ADDQ BX, P

// STEP loads the 64 bits at bit Q of pad and makes four lookups.
#define STEP(Q, P) \
	MOVQ Q, AX; \
	SHRQ $3, AX; \
	MOVQ (R9)(AX*1), AX; \
	BSWAPQ AX; \
	MOVQ Q, CX; \
	ANDQ $7, CX; \
	SHLQ CX, AX; \
	LOOKUP(Q, P); \
	LOOKUP(Q, P); \
	LOOKUP(Q, P); \
	LOOKUP(Q, P)

// ALONE steps lane Q (symbol address P, its buffer OFF bytes into lanes,
// its end at END in the state) once if it is below its limit and not
// past its end, noting in more-8(SP) that it did; SKIP is the label past
// it.
#define ALONE(Q, P, OFF, END, SKIP) \
	MOVQ s+24(FP), DX; \
	CMPQ Q, END(DX); \
	JGT SKIP; \
	MOVQ 96(DX), BX; \
	ADDQ lanes+16(FP), BX; \
	ADDQ $OFF, BX; \
	CMPQ P, BX; \
	JHI SKIP; \
	MOVB $1, more-8(SP); \
	STEP(Q, P); \
SKIP:

TEXT ·laneSteps4Asm(SB), NOSPLIT, $8-33
	MOVQ mt+0(FP), R8
	MOVQ pad+8(FP), R9
	MOVQ lanes+16(FP), BX
	MOVQ s+24(FP), DX
	MOVQ 0(DX), R10
	MOVQ 8(DX), R11
	MOVQ 16(DX), R12
	MOVQ 24(DX), R13
	MOVQ 32(DX), SI
	ADDQ BX, SI
	MOVQ 40(DX), DI
	LEAQ 528(BX)(DI*1), DI
	MOVQ 48(DX), R14
	LEAQ 1056(BX)(R14*1), R14
	MOVQ 56(DX), R15
	LEAQ 1584(BX)(R15*1), R15

loop:
	MOVQ s+24(FP), DX
	CMPQ R10, 64(DX)
	JGT done
	CMPQ R11, 72(DX)
	JGT done
	CMPQ R12, 80(DX)
	JGT done
	CMPQ R13, 88(DX)
	JGT done
	MOVQ 96(DX), BX
	ADDQ lanes+16(FP), BX
	CMPQ SI, BX
	JHI done
	ADDQ $528, BX
	CMPQ DI, BX
	JHI done
	ADDQ $528, BX
	CMPQ R14, BX
	JHI done
	ADDQ $528, BX
	CMPQ R15, BX
	JHI done
	STEP(R10, SI)
	STEP(R11, DI)
	STEP(R12, R14)
	STEP(R13, R15)
	JMP loop

done:
	// A lane is at its limit or past its end: the others go on, each
	// while it is below its own (so that laneTail decodes at most the
	// last twelve symbols of a lane in Go), until none steps.
	MOVB $0, more-8(SP)
	ALONE(R10, SI, 0, 64, skip0)
	ALONE(R11, DI, 528, 72, skip1)
	ALONE(R12, R14, 1056, 80, skip2)
	ALONE(R13, R15, 1584, 88, skip3)
	CMPB more-8(SP), $0
	JNE done
	MOVB $1, ret+32(FP)
	JMP store

bad:
	MOVB $0, ret+32(FP)

store:
	MOVQ s+24(FP), DX
	MOVQ lanes+16(FP), BX
	MOVQ R10, 0(DX)
	MOVQ R11, 8(DX)
	MOVQ R12, 16(DX)
	MOVQ R13, 24(DX)
	SUBQ BX, SI
	MOVQ SI, 32(DX)
	SUBQ BX, DI
	SUBQ $528, DI
	MOVQ DI, 40(DX)
	SUBQ BX, R14
	SUBQ $1056, R14
	MOVQ R14, 48(DX)
	SUBQ BX, R15
	SUBQ $1584, R15
	MOVQ R15, 56(DX)
	RET

// func transposeLanesAVX(dst, lanes *byte, blocks int)
//
// The lane-major buffer of a full chunk (lane k's 16*blocks symbols at
// lanes + k*528) into symbol order (symbol r*32+k at dst + r*32 + k),
// 8 lanes by 16 rows at a time: three rounds of unpacks (bytes, words,
// doublewords) turn the 8 lanes' 16 symbols into 16 rows of 8, two rows
// a register, stored 8 bytes at a time.
TEXT ·transposeLanesAVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ lanes+8(FP), SI
	MOVQ $4, R8 // blocks of 8 lanes

lanes8:
	MOVQ blocks+16(FP), R9 // blocks of 16 rows
	MOVQ SI, R10
	MOVQ DI, R11

rows16:
	VMOVDQU 0(R10), X0
	VMOVDQU 528(R10), X1
	VMOVDQU 1056(R10), X2
	VMOVDQU 1584(R10), X3
	VMOVDQU 2112(R10), X4
	VMOVDQU 2640(R10), X5
	VMOVDQU 3168(R10), X6
	VMOVDQU 3696(R10), X7
	// Bytes: lanes 0,1 / 2,3 / 4,5 / 6,7 side by side, rows 0-7 and 8-15.
	VPUNPCKLBW X1, X0, X8
	VPUNPCKHBW X1, X0, X9
	VPUNPCKLBW X3, X2, X10
	VPUNPCKHBW X3, X2, X11
	VPUNPCKLBW X5, X4, X12
	VPUNPCKHBW X5, X4, X13
	VPUNPCKLBW X7, X6, X14
	VPUNPCKHBW X7, X6, X15
	// Words: lanes 0-3 and 4-7, rows 0-3, 4-7, 8-11, 12-15.
	VPUNPCKLWD X10, X8, X0
	VPUNPCKHWD X10, X8, X1
	VPUNPCKLWD X11, X9, X2
	VPUNPCKHWD X11, X9, X3
	VPUNPCKLWD X14, X12, X4
	VPUNPCKHWD X14, X12, X5
	VPUNPCKLWD X15, X13, X6
	VPUNPCKHWD X15, X13, X7
	// Doublewords: lanes 0-7, two rows a register.
	VPUNPCKLDQ X4, X0, X8
	VPUNPCKHDQ X4, X0, X9
	VPUNPCKLDQ X5, X1, X10
	VPUNPCKHDQ X5, X1, X11
	VPUNPCKLDQ X6, X2, X12
	VPUNPCKHDQ X6, X2, X13
	VPUNPCKLDQ X7, X3, X14
	VPUNPCKHDQ X7, X3, X15
	VMOVQ X8, 0(R11)
	VMOVHPS X8, 32(R11)
	VMOVQ X9, 64(R11)
	VMOVHPS X9, 96(R11)
	VMOVQ X10, 128(R11)
	VMOVHPS X10, 160(R11)
	VMOVQ X11, 192(R11)
	VMOVHPS X11, 224(R11)
	VMOVQ X12, 256(R11)
	VMOVHPS X12, 288(R11)
	VMOVQ X13, 320(R11)
	VMOVHPS X13, 352(R11)
	VMOVQ X14, 384(R11)
	VMOVHPS X14, 416(R11)
	VMOVQ X15, 448(R11)
	VMOVHPS X15, 480(R11)
	ADDQ $16, R10
	ADDQ $512, R11
	DECQ R9
	JNZ rows16

	ADDQ $4224, SI // 8 lanes of 528 bytes
	ADDQ $8, DI
	DECQ R8
	JNZ lanes8
	RET
