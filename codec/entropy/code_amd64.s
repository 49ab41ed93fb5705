//go:build amd64 && !noasm

#include "textflag.h"

// func codeLanesBMI2(out *byte, pos int, acc uint64, nb uint, tab *[MaxSymbols]uint32, syms *byte, n, L int, ends *[Lanes]uint64) (rpos int, racc uint64, rnb uint, ok bool)
//
// codeLanes (chunk.go) with BMI2 shifts: lanes 0..L-1 of the n symbols
// at syms, four codes of a lane joined in acc and written with one 8-byte
// big-endian store at out+pos, then one at a time for a lane's last
// symbols. ends[k] is set to the bit where lane k ends; ok is false when a
// symbol's entry is 0 (no code). The caller guarantees 8 bytes of room
// past the last byte written.
//
// Registers: DI out, R8 pos, SI acc, BX nb, R9 tab, R10 L, R13 3L,
// R12 syms+n, R11 the lane's next symbol, R14 lane, DX every entry - 1
// or'ed (bit 31: an entry 0), AX and CX scratch.

// CODE joins the code of the symbol at ADDR to acc.
#define CODE(ADDR) \
	MOVBLZX ADDR, AX; \
	MOVL (R9)(AX*4), AX; \
	LEAL -1(AX), CX; \
	ORL CX, DX; \
	MOVL AX, CX; \
	ANDL $31, CX; \
	SHRL $5, AX; \
	SHLXQ CX, SI, SI; \
	ORQ AX, SI; \
	ADDQ CX, BX

// PUT writes the nb pending bits of acc at out+pos and keeps nb&7.
#define PUT \
	MOVL $64, CX; \
	SUBL BX, CX; \
	SHLXQ CX, SI, AX; \
	BSWAPQ AX; \
	MOVQ AX, (DI)(R8*1); \
	MOVQ BX, AX; \
	SHRQ $3, AX; \
	ADDQ AX, R8; \
	ANDQ $7, BX

TEXT ·codeLanesBMI2(SB), NOSPLIT, $0-97
	MOVQ out+0(FP), DI
	MOVQ pos+8(FP), R8
	MOVQ acc+16(FP), SI
	MOVQ nb+24(FP), BX
	MOVQ tab+32(FP), R9
	MOVQ L+56(FP), R10
	LEAQ (R10)(R10*2), R13
	MOVQ syms+40(FP), R12
	ADDQ n+48(FP), R12
	XORL DX, DX
	XORL R14, R14

lane:
	MOVQ syms+40(FP), R11
	ADDQ R14, R11

group:
	LEAQ (R11)(R13*1), AX
	CMPQ AX, R12
	JAE single
	CODE((R11))
	CODE((R11)(R10*1))
	CODE((R11)(R10*2))
	CODE((R11)(R13*1))
	PUT
	LEAQ (R11)(R10*4), R11
	JMP group

single:
	CMPQ R11, R12
	JAE laneEnd
	CODE((R11))
	PUT
	ADDQ R10, R11
	JMP single

laneEnd:
	MOVQ R8, AX
	SHLQ $3, AX
	ADDQ BX, AX
	MOVQ ends+64(FP), CX
	MOVQ AX, (CX)(R14*8)
	INCQ R14
	CMPQ R14, R10
	JB lane

	MOVQ R8, rpos+72(FP)
	MOVQ SI, racc+80(FP)
	MOVQ BX, rnb+88(FP)
	SHRL $31, DX
	XORL $1, DX
	MOVB DX, ok+96(FP)
	RET
