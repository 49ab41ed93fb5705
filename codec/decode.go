package codec

import (
	"encoding/binary"
	"fmt"

	"github.com/splitzip/splitzip/codec/internal/crc32c"
)

// ParseHeader decodes and checks the fixed header of a payload. It needs
// only the first HeaderSize bytes and does not verify the checksum, but
// for a version this build does not read: given the whole payload, a
// version its checksum does not cover is corruption (ErrCorrupt), not
// ErrVersion.
func ParseHeader(p []byte) (Header, error) {
	var h Header
	if len(p) < HeaderSize {
		return h, corrupt(0, -1, "%d bytes, shorter than the %d-byte header", len(p), HeaderSize)
	}
	if string(p[offMagic:offMagic+4]) != Magic {
		return h, corrupt(offMagic, -1, "bad magic %q", p[offMagic:offMagic+4])
	}
	if v := binary.LittleEndian.Uint16(p[offVersion:]); v != Version {
		// Given a whole payload, a version field that its checksum does
		// not cover is damage, not a payload of another version.
		if binary.LittleEndian.Uint64(p[offSize:]) == uint64(len(p)) && Checksum(p) != binary.LittleEndian.Uint32(p[offChecksum:]) {
			return h, damagedVersion(v)
		}
		return h, fmt.Errorf("%w: version %d; this build reads version %d", ErrVersion, v, Version)
	}
	if hs := binary.LittleEndian.Uint16(p[offHeaderSize:]); hs != HeaderSize {
		return h, corrupt(offHeaderSize, -1, "header size %d, want %d", hs, HeaderSize)
	}
	h.Values = binary.LittleEndian.Uint64(p[offValues:])
	h.ChunkValues = binary.LittleEndian.Uint32(p[offChunkValues:])
	h.GroupChunks = binary.LittleEndian.Uint32(p[offGroupChunks:])
	copy(h.Codebook[:], p[offCodebook:])
	h.Escapes = binary.LittleEndian.Uint64(p[offEscapes:])
	h.Size = binary.LittleEndian.Uint64(p[offSize:])
	h.Checksum = binary.LittleEndian.Uint32(p[offChecksum:])
	h.InPlace = binary.LittleEndian.Uint32(p[offFlags:])&FlagInPlace != 0
	switch {
	case h.Values > MaxValues:
		return h, corrupt(offValues, -1, "%d values, at most %d", h.Values, MaxValues)
	case h.ChunkValues != ChunkValues:
		return h, corrupt(offChunkValues, -1, "chunk of %d values, version 1 uses %d", h.ChunkValues, ChunkValues)
	case h.GroupChunks != groupChunksFor(h.Values):
		return h, corrupt(offGroupChunks, -1, "%d chunks per group, want %d", h.GroupChunks, groupChunksFor(h.Values))
	case !h.Codebook.valid():
		return h, corrupt(offCodebook, -1, "codebook entries are not distinct")
	case binary.LittleEndian.Uint32(p[offFlags:])&^FlagInPlace != 0:
		return h, corrupt(offFlags, -1, "reserved flags are set")
	case h.Size < h.DataStart():
		return h, corrupt(offSize, -1, "payload size %d below the table end %d", h.Size, h.DataStart())
	}
	return h, nil
}

// damagedVersion is the error of a payload whose version field v, not
// one this build reads, its checksum does not cover: damage.
func damagedVersion(v uint16) error {
	return corrupt(offVersion, -1, "version %d (this build reads version %d) and a checksum that does not match", v, Version)
}

// Checksum returns the CRC-32C of a payload with its checksum field taken as zero.
func Checksum(p []byte) uint32 { return ChecksumWithout(p, offChecksum) }

// zeroField is a checksum field taken as zero: a package variable, as a
// local array passed to the CRC would escape and cost an allocation a
// payload checked.
var zeroField [4]byte

// ChecksumWithout returns the CRC-32C of b with the 4 bytes at offset at
// (a checksum field, inside b) taken as zero: the checksum of every
// format here that holds its own. Bytes too short to hold the field (no
// payload of any format) are summed as they are.
func ChecksumWithout(b []byte, at int) uint32 {
	if at < 0 || len(b) < at+4 {
		return crc32c.Update(0, b)
	}
	crc := crc32c.Update(0, b[:at])
	crc = crc32c.Update(crc, zeroField[:])
	return crc32c.Update(crc, b[at+4:])
}

// layout is a parsed payload whose tables have been checked.
type layout struct {
	h       Header
	l1      []uint64
	entries []entry
}

// parse checks everything but the chunk contents: header, size, checksum
// (on up to workers goroutines), tables, offsets, reader ranges and the
// in-place invariant.
func parse(p []byte, workers int) (*layout, error) {
	h, err := ParseHeader(p)
	if err != nil {
		return nil, err
	}
	if err := CheckPayload(&h, uint64(len(p)), ChecksumParallel(p, workers), 0); err != nil {
		return nil, err
	}
	return parseTables(h, func(off, n uint64) ([]byte, error) { return p[off : off+n], nil })
}

func checksumError(got, want uint32) error {
	return &CorruptError{Offset: offChecksum, Chunk: -1, Err: ErrChecksum,
		Reason: fmt.Sprintf("computed %08x over the payload, the header says %08x (the damage may be anywhere in it)", got, want)}
}

// parseTables reads and checks the tables of a payload whose header is h,
// through at, which returns n bytes at off (within h.Size).
func parseTables(h Header, at func(off, n uint64) ([]byte, error)) (*layout, error) {
	front, err := at(HeaderSize, h.DataStart()-HeaderSize)
	if err != nil {
		return nil, err
	}
	if err := checkZero(front[8*h.Groups():]); err != nil {
		return nil, corrupt(HeaderSize+8*h.Groups(), -1, "table padding is not zero")
	}
	L := &layout{h: h, l1: make([]uint64, h.Groups()), entries: make([]entry, h.Chunks())}
	// Offsets are canonical: each group starts where the previous data
	// ends, its table is followed by its chunks without gaps.
	pos := h.DataStart()
	N := h.Chunks()
	var table []byte
	for c := range N {
		g, j := h.group(c)
		if j == 0 {
			L.l1[g] = binary.LittleEndian.Uint64(front[8*g:])
			if L.l1[g] != pos {
				return nil, corrupt(HeaderSize+8*g, -1, "group %d at offset %d, want %d", g, L.l1[g], pos)
			}
			_, cnt := h.groupSpan(g)
			tab := align(EntrySize * cnt)
			if pos+tab > h.Size {
				return nil, corrupt(pos, -1, "group %d table runs past the payload end", g)
			}
			if table, err = at(pos, tab); err != nil {
				return nil, err
			}
			if err := checkZero(table[EntrySize*cnt:]); err != nil {
				return nil, corrupt(pos, -1, "group %d table padding is not zero", g)
			}
			pos += tab
		}
		epos := L.l1[g] + EntrySize*j
		e := getEntry(table[EntrySize*j:])
		if e.Offset != pos {
			return nil, corrupt(epos, int64(c), "data at offset %d, want %d", e.Offset, pos)
		}
		cnt := h.chunkCount(c)
		if e.Escapes != RawEscapes && int(e.Escapes) > maxCodedEscapes(cnt) {
			return nil, corrupt(epos, int64(c), "%d escapes, at most %d", e.Escapes, maxCodedEscapes(cnt))
		}
		n := chunkLen(cnt, e.Escapes)
		if pos+n > h.Size {
			return nil, corrupt(epos, int64(c), "data runs past the payload end")
		}
		L.entries[c] = e
		pos += n
	}
	if pos != h.Size {
		return nil, corrupt(pos, -1, "%d trailing bytes", h.Size-pos)
	}
	// The flag is set exactly when the invariant holds; reader ranges are
	// filled in exactly then.
	lo, span, rerr := readers(&h, L.l1, L.entries)
	switch err := rerr; {
	case err != nil && h.InPlace:
		return nil, &CorruptError{Offset: offFlags, Chunk: -1, Reason: err.Error(), Err: ErrCorrupt}
	case err == nil && !h.InPlace:
		return nil, corrupt(offFlags, -1, "in-place flag missing on an in-place payload")
	case err != nil:
		lo, span = make([]uint32, N), make([]uint16, N)
	}
	var escapes uint64
	for c, e := range L.entries {
		if e.ReadLo != lo[c] || e.ReadSpan != span[c] {
			g, j := h.group(uint64(c))
			return nil, corrupt(L.l1[g]+EntrySize*j, int64(c),
				"reader range %d+%d, want %d+%d", e.ReadLo, e.ReadSpan, lo[c], span[c])
		}
		if e.Escapes != RawEscapes {
			escapes += uint64(e.Escapes)
		}
	}
	if escapes != h.Escapes {
		return nil, corrupt(offEscapes, -1, "header counts %d escapes, chunks hold %d", h.Escapes, escapes)
	}
	return L, nil
}

// Validate checks a payload completely, chunk contents included, without
// producing output.
func Validate(p []byte, opts ...Option) (Header, error) {
	return decode(nil, p, opts)
}

// Decode decodes payload p into dst, which must hold exactly 2*Values bytes.
// It checks the payload as Validate does and writes nothing it has not
// checked the place of; on error dst holds partial output.
func Decode(dst, p []byte, opts ...Option) error {
	_, err := decode(dst, p, opts)
	return err
}

// DecodedSize returns the number of bytes a payload decodes to, from its header.
func DecodedSize(p []byte) (uint64, error) {
	h, err := ParseHeader(p)
	return 2 * h.Values, err
}

func decode(dst, p []byte, opts []Option) (Header, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return Header{}, err
	}
	L, err := parse(p, o.workers)
	if err != nil {
		return Header{}, err
	}
	h := L.h
	if dst != nil && uint64(len(dst)) != 2*h.Values {
		return h, fmt.Errorf("%w: destination of %d bytes for %d values", ErrSize, len(dst), h.Values)
	}
	lut := pairTable(&h.Codebook)
	codes := h.Codebook.codeTable()
	N := int(h.Chunks())
	errs := make([]error, o.workers)
	parallel(o.workers, N, func(w, lo, hi int) {
		var scratch []byte
		if dst == nil {
			scratch = make([]byte, 2*ChunkValues)
		}
		for c := lo; c < hi; c++ {
			cnt := h.chunkCount(uint64(c))
			var out []byte
			if dst != nil {
				start := uint64(c) * ChunkValues * 2
				out = dst[start : start+2*uint64(cnt)]
			} else {
				out = scratch[:2*cnt]
			}
			e := L.entries[c]
			data := p[e.Offset : e.Offset+chunkLen(cnt, e.Escapes)]
			if reason := decodeChunk(out, data, e.Escapes, &h.Codebook, lut, &codes); reason != "" {
				errs[w] = corrupt(e.Offset, int64(c), "%s", reason)
				return
			}
		}
	})
	for _, err := range errs {
		if err != nil {
			return h, err
		}
	}
	return h, nil
}

// pairTable maps a byte of two codes to the exponent bits of both values,
// placed in two 16-bit lanes.
func pairTable(cb *Codebook) *[256]uint64 {
	var t [256]uint64
	for b := range t {
		t[b] = uint64(cb[b&15])<<7 | uint64(cb[b>>4])<<23
	}
	return &t
}

// decodeChunk decodes one stored chunk into out (2 bytes per value) and
// returns "" or the reason the chunk is invalid.
func decodeChunk(out, data []byte, escapes uint16, cb *Codebook, lut *[256]uint64, codes *[256]byte) string {
	cnt := len(out) / 2
	if escapes == RawEscapes {
		copy(out, data[:2*cnt])
		if checkZero(data[2*cnt:]) != nil {
			return "raw chunk padding is not zero"
		}
		return ""
	}
	sm := data[:cnt]
	nibOff := nibOffset(cnt)
	nib := data[nibOff : nibOff+uint64(cnt+1)/2]
	i := decodeGroups(out, sm, nib, cb)
	for ; i+8 <= cnt; i += 8 {
		nb := binary.LittleEndian.Uint32(nib[i/2:])
		s := binary.LittleEndian.Uint64(sm[i:])
		o := (*[16]byte)(out[2*i:])
		binary.LittleEndian.PutUint64(o[:8], spread(uint32(s))|lut[byte(nb)]|lut[byte(nb>>8)]<<32)
		binary.LittleEndian.PutUint64(o[8:], spread(uint32(s>>32))|lut[byte(nb>>16)]|lut[nb>>24]<<32)
	}
	for ; i < cnt; i++ {
		code := nib[i/2] >> (4 * (i % 2)) & 15
		s := uint64(sm[i])
		w := s&0x7f | (s&0x80)<<8 | lut[code]&0xffff
		binary.LittleEndian.PutUint16(out[2*i:], uint16(w))
	}
	if cnt%2 == 1 && nib[cnt/2]>>4 != 0 {
		return "unused nibble is not zero"
	}
	escOff := escOffset(cnt)
	if checkZero(data[cnt:nibOff]) != nil || checkZero(data[nibOff+uint64(len(nib)):escOff]) != nil ||
		checkZero(data[escOff+3*uint64(escapes):]) != nil {
		return "padding is not zero"
	}
	exps := data[escOff+2*uint64(escapes):]
	prev := -1
	for j := range int(escapes) {
		pos := int(binary.LittleEndian.Uint16(data[escOff+2*uint64(j):]))
		exp := exps[j]
		switch {
		case pos <= prev || pos >= cnt:
			return fmt.Sprintf("escape %d at position %d out of order or range", j, pos)
		case codes[exp]&escapeCode == 0:
			return fmt.Sprintf("escape %d holds exponent %d, which has a code", j, exp)
		case nib[pos/2]>>(4*(pos%2))&15 != 0:
			return fmt.Sprintf("escape %d at position %d has a nonzero code", j, pos)
		}
		prev = pos
		v := binary.LittleEndian.Uint16(out[2*pos:])
		binary.LittleEndian.PutUint16(out[2*pos:], v&0x807f|uint16(exp)<<7)
	}
	return ""
}

// spread places four sign-and-mantissa bytes in the sign and mantissa bits
// of four 16-bit lanes.
func spread(s uint32) uint64 {
	v := uint64(s)
	v = (v | v<<16) & 0x0000FFFF0000FFFF
	v = (v | v<<8) & 0x00FF00FF00FF00FF
	return v&0x007F007F007F007F | (v&0x0080008000800080)<<8
}

func checkZero(b []byte) error {
	for _, x := range b {
		if x != 0 {
			return ErrCorrupt
		}
	}
	return nil
}
