package convert

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// field is one protobuf field: its number, wire type, and either its
// varint value (wire types 0, 1, 5: fixed values are read as integers) or
// its bytes (wire type 2).
type field struct {
	num  int
	wire int
	v    uint64
	b    []byte
}

var errTruncated = errors.New("truncated protobuf message")

// fields splits a protobuf message into its fields, in order.
func fields(msg []byte) ([]field, error) {
	var out []field
	for len(msg) > 0 {
		key, n := binary.Uvarint(msg)
		if n <= 0 {
			return nil, errTruncated
		}
		msg = msg[n:]
		f := field{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case 0:
			f.v, n = binary.Uvarint(msg)
			if n <= 0 {
				return nil, errTruncated
			}
			msg = msg[n:]
		case 1:
			if len(msg) < 8 {
				return nil, errTruncated
			}
			f.v, msg = binary.LittleEndian.Uint64(msg), msg[8:]
		case 5:
			if len(msg) < 4 {
				return nil, errTruncated
			}
			f.v, msg = uint64(binary.LittleEndian.Uint32(msg)), msg[4:]
		case 2:
			l, n := binary.Uvarint(msg)
			if n <= 0 || l > uint64(len(msg)-n) {
				return nil, errTruncated
			}
			f.b, msg = msg[n:n+int(l)], msg[n+int(l):]
		default:
			return nil, fmt.Errorf("protobuf wire type %d is not supported", f.wire)
		}
		out = append(out, f)
	}
	return out, nil
}

// varints returns a repeated integer field, packed or not.
func varints(fs []field, num int) ([]uint64, error) {
	var out []uint64
	for _, f := range fs {
		if f.num != num {
			continue
		}
		switch f.wire {
		case 0:
			out = append(out, f.v)
		case 2:
			for b := f.b; len(b) > 0; {
				v, n := binary.Uvarint(b)
				if n <= 0 {
					return nil, errTruncated
				}
				out, b = append(out, v), b[n:]
			}
		}
	}
	return out, nil
}
