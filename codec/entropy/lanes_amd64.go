//go:build amd64 && !noasm

package entropy

// useLaneAsm selects the assembly loop of laneSteps4; tests turn it off
// to check the Go loop too. The transpose (AVX) goes with useAVX2.
var useLaneAsm = true

// laneSteps4Asm is laneSteps4's loop in assembly (lanes_amd64.s), with
// laneStride 528 and laneSyms 512 written into it.
//
//go:noescape
func laneSteps4Asm(mt *multiTable, pad, lanes *byte, s *laneQuad) bool

// transposeLanesAVX writes a full chunk's lane-major buffer (Lanes lanes
// of laneSyms symbols, laneStride bytes apart) to dst in symbol order.
//
//go:noescape
func transposeLanesAVX(dst, lanes *byte)

// transposeLanes writes the lane-major buffer of a full chunk to dst in
// symbol order with vector instructions, and reports whether it could.
func transposeLanes(dst []byte, lanes *[Lanes * laneStride]byte) bool {
	if !useAVX2 {
		return false
	}
	_ = dst[Lanes*laneSyms-1]
	transposeLanesAVX(&dst[0], &lanes[0])
	return true
}

// The lane constants written into the assembly.
const (
	_ = uint(laneStride-528) + uint(528-laneStride)
	_ = uint(laneSyms-512) + uint(512-laneSyms)
)

// laneSteps4 decodes four lanes side by side, as laneSteps4Go does.
func laneSteps4(mt *multiTable, pad, lanes []byte, s *laneQuad) bool {
	if !useLaneAsm {
		return laneSteps4Go(mt, pad, lanes, s)
	}
	_ = lanes[4*laneStride-1]
	return laneSteps4Asm(mt, &pad[0], &lanes[0], s)
}
