//go:build amd64 && !noasm

#include "textflag.h"

// func laneSteps4Asm(mt *multiTable, pad, lanes *byte, s *laneQuad) bool
//
// The loop of laneSteps4 (multi.go) for four lanes at once: while every
// lane k has q[k] <= end[k] and j[k] <= laneSyms-12, each makes four
// lookups of the multi-symbol table from the 64 bits of pad at bit q[k],
// storing each entry's four low bytes at lane k's symbol j[k] and moving
// j[k] by its symbol count and q[k] by its bits. It returns false at an
// entry of no code (0). Lane k's buffer is lanes + k*528 (laneStride),
// and its last start of a step lanes + k*528 + 500 (laneSyms-12).
//
// Registers: R8 mt, R9 pad, R10-R13 q[0..3], SI DI R14 R15 lane k's next
// symbol as an address, AX the window, BX an entry, CX a shift, DX spare.

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

TEXT ·laneSteps4Asm(SB), NOSPLIT, $0-33
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
	MOVQ lanes+16(FP), DX
	LEAQ 500(DX), BX
	CMPQ SI, BX
	JHI done
	LEAQ 1028(DX), BX
	CMPQ DI, BX
	JHI done
	LEAQ 1556(DX), BX
	CMPQ R14, BX
	JHI done
	LEAQ 2084(DX), BX
	CMPQ R15, BX
	JHI done
	STEP(R10, SI)
	STEP(R11, DI)
	STEP(R12, R14)
	STEP(R13, R15)
	JMP loop

done:
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
