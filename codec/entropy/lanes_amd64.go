//go:build amd64 && !noasm

package entropy

// useLaneAsm selects the assembly loop of laneSteps4; tests turn it off
// to check the Go loop too. The transpose (AVX) goes with useAVX2.
var useLaneAsm = true

// laneSteps4Asm is laneSteps4's loop in assembly (lanes_amd64.s), with
// laneStride 528 written into it.
//
//go:noescape
func laneSteps4Asm(mt *multiTable, pad, lanes *byte, s *laneQuad) bool

// transposeLanesAVX writes a full chunk's lane-major buffer (Lanes lanes
// of 16 x blocks symbols, laneStride bytes apart) to dst in symbol order.
//
//go:noescape
func transposeLanesAVX(dst, lanes *byte, blocks int)

// transposeLanes writes the lane-major buffer of a full chunk of m
// symbols a lane to dst in symbol order with vector instructions, and
// reports whether it could (m a multiple of 16, at most laneSyms).
func transposeLanes(dst []byte, lanes *[Lanes * laneStride]byte, m int) bool {
	if !useAVX2 || m%16 != 0 || m <= 0 || m > laneSyms {
		return false
	}
	_ = dst[Lanes*m-1]
	transposeLanesAVX(&dst[0], &lanes[0], m/16)
	return true
}

// The lane constant written into the assembly.
const _ = uint(laneStride-528) + uint(528-laneStride)

// laneSteps4 decodes four lanes side by side, as laneSteps4Go does.
func laneSteps4(mt *multiTable, pad, lanes []byte, s *laneQuad) bool {
	if !useLaneAsm {
		return laneSteps4Go(mt, pad, lanes, s)
	}
	_ = lanes[4*laneStride-1]
	return laneSteps4Asm(mt, &pad[0], &lanes[0], s)
}
