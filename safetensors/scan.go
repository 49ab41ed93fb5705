package safetensors

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
	"math/bits"
	"strings"
)

// scanHeader is Read's fast path: one pass over the JSON header of the
// shape writers produce, with no per-field allocation. Names are
// substrings of one string, shapes share one backing array, dtypes are
// interned. It gives up (ok false) on anything it does not handle (escapes
// in names or dtypes, array entries, unknown entry fields, numbers that
// are not plain unsigned integers, repeated keys, malformed JSON), and
// Read then takes the general path, which decides and explains; so the
// fast path only ever accepts what the general path accepts, with the same
// result. Begin and End of the tensors it returns are relative to the data
// section, in header order.
func scanHeader(b []byte) (ts []Tensor, meta map[string]string, ok bool) {
	s := scanner{b: b}
	if !s.lit('{') {
		return nil, nil, false
	}
	var (
		shapes = make([]uint64, 0, len(b)/96+1)
		ends   = make([]scanEnds, 0, len(b)/96+1) // where each tensor's name is in b, and its shape ends
		nlen   int                                // the names' total length
		dtypes []string                           // interned
		sawMD  bool
	)
	ts = make([]Tensor, 0, len(b)/96+1)
	if !s.lit('}') {
		for {
			key, ok := s.str()
			keyAt := s.i - len(key) - 1 // s.i is past the closing quote
			if !ok || !s.lit(':') {
				return nil, nil, false
			}
			if string(key) == "__metadata__" {
				if sawMD {
					return nil, nil, false
				}
				sawMD = true
				if meta, ok = s.metadata(); !ok {
					return nil, nil, false
				}
			} else {
				var t Tensor
				if !s.entry(&t, &shapes, &dtypes) {
					return nil, nil, false
				}
				ts = append(ts, t)
				ends = append(ends, scanEnds{uint32(keyAt), uint32(len(key)), uint32(len(shapes))})
				nlen += len(key)
			}
			if s.lit(',') {
				continue
			}
			if s.lit('}') {
				break
			}
			return nil, nil, false
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return nil, nil, false
	}
	// One string holds every name, so a name costs no allocation of its own.
	var names strings.Builder
	names.Grow(nlen)
	for _, e := range ends {
		names.Write(b[e.name : e.name+e.nameLen])
	}
	all := names.String()
	n, sh := 0, uint32(0)
	for k, e := range ends {
		ts[k].Name = all[n : n+int(e.nameLen)]
		ts[k].Shape = shapes[sh:e.shape:e.shape]
		n, sh = n+int(e.nameLen), e.shape
	}
	// Repeated names: writers usually sort them, which proves there are
	// none without a set.
	sorted := true
	for k := 1; k < len(ts); k++ {
		if ts[k-1].Name >= ts[k].Name {
			sorted = false
			break
		}
	}
	if !sorted && repeatedName(ts) {
		return nil, nil, false
	}
	return ts, meta, true
}

// repeatedName reports whether two tensors share a name. Its set is an
// open-addressed table of tensor indices, a quarter the size of a map of
// strings.
func repeatedName(ts []Tensor) bool {
	table := make([]uint32, 1<<bits.Len(uint(2*len(ts)))) // index+1; 0 is empty
	mask := uint64(len(table) - 1)
	seed := maphash.MakeSeed()
	for k := range ts {
		for j := maphash.String(seed, ts[k].Name) & mask; ; j = (j + 1) & mask {
			if table[j] == 0 {
				table[j] = uint32(k + 1)
				break
			}
			if ts[table[j]-1].Name == ts[k].Name {
				return true
			}
		}
	}
	return false
}

// scanEnds is where one tensor's name is in the header and where its shape
// ends in the shapes array.
type scanEnds struct{ name, nameLen, shape uint32 }

// scanner reads JSON text b from i.
type scanner struct {
	b []byte
	i int
}

// ws skips the whitespace JSON allows between tokens.
func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// lit consumes byte c after whitespace, if it is next.
func (s *scanner) lit(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string with no escapes and no control characters, and
// returns its contents (the header is already known to be UTF-8).
func (s *scanner) str() ([]byte, bool) {
	if !s.lit('"') {
		return nil, false
	}
	j := bytes.IndexByte(s.b[s.i:], '"')
	if j < 0 {
		return nil, false
	}
	v := s.b[s.i : s.i+j]
	for _, c := range v {
		if c < 0x20 || c == '\\' {
			return nil, false
		}
	}
	s.i += j + 1
	return v, true
}

// uint reads a JSON number that is an unsigned integer of at most 64 bits.
// A fraction or exponent is left unread, so the caller's next token fails.
func (s *scanner) uint() (uint64, bool) {
	s.ws()
	start := s.i
	var n uint64
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		d := uint64(s.b[s.i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
		s.i++
	}
	if s.i == start || s.b[start] == '0' && s.i-start > 1 {
		return 0, false
	}
	return n, true
}

// entry reads a tensor entry object with exactly the fields dtype, shape
// and data_offsets, in any order.
func (s *scanner) entry(t *Tensor, shapes *[]uint64, dtypes *[]string) bool {
	if !s.lit('{') {
		return false
	}
	var seen uint8
	for {
		key, ok := s.str()
		if !ok || !s.lit(':') {
			return false
		}
		var bit uint8
		switch string(key) {
		case "dtype":
			bit = 1
			v, ok := s.str()
			if !ok {
				return false
			}
			t.DType = intern(dtypes, v)
		case "shape":
			bit = 2
			if !s.lit('[') {
				return false
			}
			if !s.lit(']') {
				for {
					d, ok := s.uint()
					if !ok {
						return false
					}
					*shapes = append(*shapes, d)
					if s.lit(',') {
						continue
					}
					if s.lit(']') {
						break
					}
					return false
				}
			}
		case "data_offsets":
			bit = 4
			var ok1, ok2 bool
			if !s.lit('[') {
				return false
			}
			t.Begin, ok1 = s.uint()
			if !ok1 || !s.lit(',') {
				return false
			}
			t.End, ok2 = s.uint()
			if !ok2 || !s.lit(']') {
				return false
			}
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		if s.lit(',') {
			continue
		}
		if s.lit('}') {
			return seen == 7
		}
		return false
	}
}

// intern returns v as one of the strings in *set, adding it if new; a file
// has few dtypes.
func intern(set *[]string, v []byte) string {
	for _, d := range *set {
		if d == string(v) {
			return d
		}
	}
	d := string(v)
	*set = append(*set, d)
	return d
}

// metadata reads __metadata__: null, or an object of strings (a repeated
// key keeps its last value, as the reference does). Strings with escapes
// are decoded by encoding/json.
func (s *scanner) metadata() (map[string]string, bool) {
	s.ws()
	if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += 4
		return nil, true
	}
	if !s.lit('{') {
		return nil, false
	}
	m := map[string]string{}
	if s.lit('}') {
		return m, true
	}
	for {
		k, ok := s.anyStr()
		if !ok || !s.lit(':') {
			return nil, false
		}
		v, ok := s.anyStr()
		if !ok {
			return nil, false
		}
		m[k] = v
		if s.lit(',') {
			continue
		}
		if s.lit('}') {
			return m, true
		}
		return nil, false
	}
}

// anyStr reads a string that may have escapes.
func (s *scanner) anyStr() (string, bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	for j := s.i + 1; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			j++
		case '"':
			var v string
			if json.Unmarshal(s.b[s.i:j+1], &v) != nil {
				return "", false
			}
			s.i = j + 1
			return v, true
		}
	}
	return "", false
}
