//go:build amd64 && !noasm

#include "textflag.h"

DATA evenIdx<>+0(SB)/8, $0x0E0C0A0806040200
DATA evenIdx<>+8(SB)/8, $0x1E1C1A1816141210
DATA evenIdx<>+16(SB)/8, $0x2E2C2A2826242220
DATA evenIdx<>+24(SB)/8, $0x3E3C3A3836343230
DATA evenIdx<>+32(SB)/8, $0x4E4C4A4846444240
DATA evenIdx<>+40(SB)/8, $0x5E5C5A5856545250
DATA evenIdx<>+48(SB)/8, $0x6E6C6A6866646260
DATA evenIdx<>+56(SB)/8, $0x7E7C7A7876747270
GLOBL evenIdx<>(SB), (NOPTR+RODATA), $64
DATA oddIdx<>+0(SB)/8, $0x0F0D0B0907050301
DATA oddIdx<>+8(SB)/8, $0x1F1D1B1917151311
DATA oddIdx<>+16(SB)/8, $0x2F2D2B2927252321
DATA oddIdx<>+24(SB)/8, $0x3F3D3B3937353331
DATA oddIdx<>+32(SB)/8, $0x4F4D4B4947454341
DATA oddIdx<>+40(SB)/8, $0x5F5D5B5957555351
DATA oddIdx<>+48(SB)/8, $0x6F6D6B6967656361
DATA oddIdx<>+56(SB)/8, $0x7F7D7B7977757371
GLOBL oddIdx<>(SB), (NOPTR+RODATA), $64

// func encodeAVX512(sm, nib, src *byte, groups int, codes *[256]byte) int
//
// Per group of 64 values (128 bytes of src): VPERMI2B gathers the low and
// high bytes; the sign-and-mantissa byte is a bitwise select (VPTERNLOGD)
// of high and low bytes; the exponent's code comes from the 256-byte code
// table with two VPERMI2B lookups blended on the exponent's top bit; codes
// are packed two per byte with VPMADDUBSW and VPMOVWB. It stops before the
// first group with an exponent outside the codebook (code bit 0x10) and
// returns the number of groups encoded.
TEXT ·encodeAVX512(SB), NOSPLIT, $0-48
	MOVQ sm+0(FP), DI
	MOVQ nib+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ groups+24(FP), CX
	MOVQ codes+32(FP), AX
	XORQ BX, BX
	VMOVDQU64 (AX), Z16
	VMOVDQU64 64(AX), Z17
	VMOVDQU64 128(AX), Z18
	VMOVDQU64 192(AX), Z19
	VMOVDQU64 evenIdx<>(SB), Z20
	VMOVDQU64 oddIdx<>(SB), Z21
	MOVQ $0x8080808080808080, R8
	VPBROADCASTQ R8, Z22
	MOVQ $0x0101010101010101, R8
	VPBROADCASTQ R8, Z23
	MOVQ $0x1010101010101010, R8
	VPBROADCASTQ R8, Z24
	MOVQ $0x1001100110011001, R8
	VPBROADCASTQ R8, Z25

loop:
	CMPQ BX, CX
	JGE done
	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQA64 Z20, Z2
	VPERMI2B Z1, Z0, Z2
	VMOVDQA64 Z21, Z3
	VPERMI2B Z1, Z0, Z3
	VPSRLW $7, Z2, Z5
	VPADDB Z3, Z3, Z4
	VPTERNLOGD $0xF8, Z23, Z5, Z4
	VPTERNLOGD $0xD8, Z22, Z3, Z2
	VMOVDQA64 Z4, Z6
	VPERMI2B Z17, Z16, Z6
	VMOVDQA64 Z4, Z7
	VPERMI2B Z19, Z18, Z7
	VPMOVB2M Z4, K1
	VPBLENDMB Z7, Z6, K1, Z8
	VPTESTMB Z24, Z8, K2
	KORTESTQ K2, K2
	JNE done
	VMOVDQU64 Z2, (DI)
	VPMADDUBSW Z25, Z8, Z9
	VPMOVWB Z9, Y10
	VMOVDQU Y10, (DX)
	ADDQ $128, SI
	ADDQ $64, DI
	ADDQ $32, DX
	INCQ BX
	JMP loop

done:
	VZEROUPPER
	MOVQ BX, ret+40(FP)
	RET
