//go:build !amd64 || noasm

package entropy

// useLaneAsm is false where there is no assembly.
var useLaneAsm = false

// laneSteps4 decodes four lanes side by side, as laneSteps4Go does.
func laneSteps4(mt *multiTable, pad, lanes []byte, s *laneQuad) bool {
	return laneSteps4Go(mt, pad, lanes, s)
}

// transposeLanes does nothing where there is no assembly.
func transposeLanes(dst []byte, lanes *[Lanes * laneStride]byte, m int) bool { return false }
