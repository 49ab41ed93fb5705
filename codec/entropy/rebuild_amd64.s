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

// func laneBitsAVX2(syms *byte, blocks int, c *laneBitsConsts, bits *[32]uint16) bool
//
// For a chunk coded in 32 lanes (symbol i in lane i mod 32, so row r of 32
// symbols holds one of each lane), the bits of each lane: the sum of its
// symbols' code lengths, through four 16-entry tables of the lengths of
// symbols lo to lo+63 (c.tabs; a symbol outside them, or one of no code,
// has length 0). Rows are taken 16 at a time (blocks of 512 bytes), their
// lengths summed a byte a lane and then widened into 16-bit sums. It
// returns false when a symbol of length 0 was met.
//
// A table is indexed by x = s - lo - 16t with bit 7 set when x >= 16
// (x + 0x70, saturating), which VPSHUFB reads as 0.
TEXT ·laneBitsAVX2(SB), NOSPLIT, $0-33
	MOVQ syms+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVQ c+16(FP), DX
	MOVQ bits+24(FP), DI
	VBROADCASTI128 0(DX), Y10
	VBROADCASTI128 16(DX), Y11
	VBROADCASTI128 32(DX), Y12
	VBROADCASTI128 48(DX), Y13
	VPXOR Y15, Y15, Y15
	VPXOR Y9, Y9, Y9
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6

block:
	TESTQ CX, CX
	JZ end
	VPXOR Y7, Y7, Y7
	MOVQ $16, R8

row:
	VMOVDQU (SI), Y0
	VPSUBB 64(DX), Y0, Y0
	VPADDUSB 128(DX), Y0, Y1
	VPSHUFB Y1, Y10, Y3
	VPSUBB 96(DX), Y0, Y0
	VPADDUSB 128(DX), Y0, Y1
	VPSHUFB Y1, Y11, Y2
	VPOR Y2, Y3, Y3
	VPSUBB 96(DX), Y0, Y0
	VPADDUSB 128(DX), Y0, Y1
	VPSHUFB Y1, Y12, Y2
	VPOR Y2, Y3, Y3
	VPSUBB 96(DX), Y0, Y0
	VPADDUSB 128(DX), Y0, Y1
	VPSHUFB Y1, Y13, Y2
	VPOR Y2, Y3, Y3
	VPCMPEQB Y15, Y3, Y4
	VPOR Y4, Y9, Y9
	VPADDB Y3, Y7, Y7
	ADDQ $32, SI
	DECQ R8
	JNZ row
	VPMOVZXBW X7, Y8
	VPADDW Y8, Y5, Y5
	VEXTRACTI128 $1, Y7, X8
	VPMOVZXBW X8, Y8
	VPADDW Y8, Y6, Y6
	DECQ CX
	JMP block

end:
	VMOVDQU Y5, (DI)
	VMOVDQU Y6, 32(DI)
	VPTEST Y9, Y9
	SETEQ ret+32(FP)
	VZEROUPPER
	RET

// func unpackF16AVX2(dst, others, syms *byte, groups int, c *f16Consts)
//
// Per group of 8 F16 values: their 11 other bits each (sign, 10 of
// mantissa), most significant first, are 11 bytes of others (16 are
// loaded), their 5-bit exponents 8 bytes of syms, and the values 16 bytes
// of dst. Value j's bits start at bit 11j: VPSHUFB puts bytes k..k+3 of it
// (k = 11j/8) big-endian into dword j (both 128-bit halves hold the 16
// bytes; the low half serves values 0-3, the high 4-7), VPSLLVD drops the
// 11j%8 bits before it and a shift right by 21 keeps its 11. The value is
// o>>10<<15 | e<<10 | o&0x3FF.
TEXT ·unpackF16AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ others+8(FP), SI
	MOVQ syms+16(FP), DX
	MOVQ groups+24(FP), CX
	MOVQ c+32(FP), R8
	VMOVDQU 0(R8), Y10  // shuffle
	VMOVDQU 32(R8), Y11 // shifts
	VMOVDQU 64(R8), Y12 // 0x3FF a dword

f16loop:
	TESTQ CX, CX
	JZ f16done
	VBROADCASTI128 (SI), Y0
	VPSHUFB Y10, Y0, Y1
	VPSLLVD Y11, Y1, Y1
	VPSRLD $21, Y1, Y1
	VPMOVZXBD (DX), Y2
	VPSLLD $10, Y2, Y2
	VPSRLD $10, Y1, Y3
	VPSLLD $15, Y3, Y3
	VPAND Y12, Y1, Y4
	VPOR Y2, Y3, Y3
	VPOR Y4, Y3, Y3
	VPACKUSDW Y3, Y3, Y3
	VPERMQ $0x08, Y3, Y3
	VMOVDQU X3, (DI)
	ADDQ $11, SI
	ADDQ $8, DX
	ADDQ $16, DI
	DECQ CX
	JMP f16loop

f16done:
	VZEROUPPER
	RET

// func unpackF32AVX2(dst, others, syms *byte, groups int, c *f32Consts)
//
// Per group of 8 F32 values: their 24 other bits each (sign, 23 of
// mantissa), big-endian, are 24 bytes of others (the low 128-bit half
// loads bytes 0-15 for values 0-3, the high half bytes 12-27 for values
// 4-7), their exponents 8 bytes of syms, and the values 32 bytes of dst.
// VPSHUFB puts each value's three bytes into a dword, and the value is
// o>>23<<31 | e<<23 | o&0x7FFFFF.
TEXT ·unpackF32AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ others+8(FP), SI
	MOVQ syms+16(FP), DX
	MOVQ groups+24(FP), CX
	MOVQ c+32(FP), R8
	VMOVDQU 0(R8), Y10  // shuffle
	VMOVDQU 32(R8), Y12 // 0x7FFFFF a dword

f32loop:
	TESTQ CX, CX
	JZ f32done
	VMOVDQU (SI), X0
	VINSERTI128 $1, 12(SI), Y0, Y0
	VPSHUFB Y10, Y0, Y1
	VPMOVZXBD (DX), Y2
	VPSLLD $23, Y2, Y2
	VPSRLD $23, Y1, Y3
	VPSLLD $31, Y3, Y3
	VPAND Y12, Y1, Y4
	VPOR Y2, Y3, Y3
	VPOR Y4, Y3, Y3
	VMOVDQU Y3, (DI)
	ADDQ $24, SI
	ADDQ $8, DX
	ADDQ $32, DI
	DECQ CX
	JMP f32loop

f32done:
	VZEROUPPER
	RET

// func unpackE4M3AVX2(dst, others, syms *byte, groups int)
//
// Per group of 32 F8_E4M3 values: their 4 other bits each (sign, 3 of
// mantissa) are 16 bytes of others, the high nibble first, their 4-bit
// exponents 32 bytes of syms, and the values 32 bytes of dst: the nibbles
// split and interleaved in order, the value (o&8)<<4 | e<<3 | o&7.
TEXT ·unpackE4M3AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ others+8(FP), SI
	MOVQ syms+16(FP), DX
	MOVQ groups+24(FP), CX
	MOVQ $0x0F0F0F0F0F0F0F0F, R8
	MOVQ R8, X10
	VPBROADCASTQ X10, Y10
	MOVQ $0x0808080808080808, R8
	MOVQ R8, X11
	VPBROADCASTQ X11, Y11
	MOVQ $0x0707070707070707, R8
	MOVQ R8, X12
	VPBROADCASTQ X12, Y12

e4loop:
	TESTQ CX, CX
	JZ e4done
	VMOVDQU (SI), X0
	VPSRLW $4, X0, X1
	VPAND X10, X1, X1 // high nibbles: values 0, 2, 4, ...
	VPAND X10, X0, X2 // low nibbles: values 1, 3, 5, ...
	VPUNPCKLBW X2, X1, X3
	VPUNPCKHBW X2, X1, X4
	VINSERTI128 $1, X4, Y3, Y3 // the 32 nibbles in order
	VMOVDQU (DX), Y5
	VPSLLW $3, Y5, Y5 // e<<3 (e < 16: no bit crosses a byte)
	VPAND Y11, Y3, Y6
	VPSLLW $4, Y6, Y6 // (o&8)<<4
	VPAND Y12, Y3, Y7
	VPOR Y5, Y6, Y6
	VPOR Y7, Y6, Y6
	VMOVDQU Y6, (DI)
	ADDQ $16, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JMP e4loop

e4done:
	VZEROUPPER
	RET

// func unpackE5M2AVX2(dst, others, syms *byte, groups int, c *e5m2Consts)
//
// Per group of 16 F8_E5M2 values: their 3 other bits each (sign, 2 of
// mantissa), most significant first, are 6 bytes of others (16 are
// loaded into both 128-bit halves), their 5-bit exponents 16 bytes of
// syms, and the values 16 bytes of dst. Value j's bits start at bit 3j:
// VPSHUFB puts bytes k, k+1 of it (k = 3j/8) big-endian into word j,
// VPMULLW by 2^(3j%8) drops the bits before it and a shift right by 13
// keeps its 3. The value is (o&4)<<5 | e<<2 | o&3.
TEXT ·unpackE5M2AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ others+8(FP), SI
	MOVQ syms+16(FP), DX
	MOVQ groups+24(FP), CX
	MOVQ c+32(FP), R8
	VMOVDQU 0(R8), Y10  // shuffle
	VMOVDQU 32(R8), Y11 // 2^(3j%8) a word
	MOVQ $0x0404040404040404, R9
	MOVQ R9, X12
	VPBROADCASTQ X12, X12
	MOVQ $0x0303030303030303, R9
	MOVQ R9, X13
	VPBROADCASTQ X13, X13

e5loop:
	TESTQ CX, CX
	JZ e5done
	VBROADCASTI128 (SI), Y0
	VPSHUFB Y10, Y0, Y1
	VPMULLW Y11, Y1, Y1
	VPSRLW $13, Y1, Y1
	VPACKUSWB Y1, Y1, Y1
	VPERMQ $0x08, Y1, Y1 // the 16 values' other bits, a byte each
	VMOVDQU (DX), X2
	VPSLLW $2, X2, X2 // e<<2 (e < 32: no bit crosses a byte)
	VPAND X12, X1, X3
	VPSLLW $5, X3, X3 // (o&4)<<5
	VPAND X13, X1, X4
	VPOR X2, X3, X3
	VPOR X4, X3, X3
	VMOVDQU X3, (DI)
	ADDQ $6, SI
	ADDQ $16, DX
	ADDQ $16, DI
	DECQ CX
	JMP e5loop

e5done:
	VZEROUPPER
	RET

// func splitF32AVX2(syms, others, raw *byte, groups int, c *f32SplitConsts)
//
// Per group of 8 F32 values (32 bytes of raw): their exponents, (v >> 23)
// & 0xFF, into 8 bytes of syms (when syms is not nil), and their other
// bits, (v >> 8) & 0x800000 | v & 0x7FFFFF, big-endian, into 24 bytes of
// others (when others is not nil; its stores are 16 bytes, so 4 bytes
// past the group's are written and must exist).
TEXT ·splitF32AVX2(SB), NOSPLIT, $0-40
	MOVQ syms+0(FP), DI
	MOVQ others+8(FP), R9
	MOVQ raw+16(FP), SI
	MOVQ groups+24(FP), CX
	MOVQ c+32(FP), R8
	VMOVDQU 0(R8), Y10  // exponent byte of each dword to the lane's first 4 bytes
	VMOVDQU 32(R8), Y11 // other bits' 3 bytes of each dword, big-endian, to the lane's first 12
	VMOVDQU 64(R8), Y12 // 0x7FFFFF a dword
	VMOVDQU 96(R8), Y13 // 0x800000 a dword
	VMOVDQU 128(R8), Y14 // dwords 0 and 4 to 0 and 1

f32sloop:
	TESTQ CX, CX
	JZ f32sdone
	VMOVDQU (SI), Y0
	TESTQ DI, DI
	JZ f32others
	VPSRLD $23, Y0, Y1
	VPSHUFB Y10, Y1, Y1
	VPERMD Y1, Y14, Y1
	VMOVQ X1, (DI)
	ADDQ $8, DI

f32others:
	TESTQ R9, R9
	JZ f32snext
	VPSRLD $8, Y0, Y2
	VPAND Y13, Y2, Y2
	VPAND Y12, Y0, Y3
	VPOR Y3, Y2, Y2
	VPSHUFB Y11, Y2, Y2
	VMOVDQU X2, (R9)
	VEXTRACTI128 $1, Y2, X3
	VMOVDQU X3, 12(R9)
	ADDQ $24, R9

f32snext:
	ADDQ $32, SI
	DECQ CX
	JMP f32sloop

f32sdone:
	VZEROUPPER
	RET
