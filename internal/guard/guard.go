// Package guard checks, for tests and fuzzers, that a decoder writes
// nothing past the destination it was given.
package guard

// size is the guard region after a destination.
const size = 64

// fill is the byte the guard region holds.
const fill = 0xA5

// Run calls fn with a destination of n bytes that is followed, in the
// same allocation, by a guard region, and returns the destination and
// whether fn wrote into the guard.
func Run(n uint64, fn func(dst []byte)) (dst []byte, overrun bool) {
	b := make([]byte, n+size)
	for i := n; i < n+size; i++ {
		b[i] = fill
	}
	fn(b[:n])
	for _, c := range b[n:] {
		if c != fill {
			return b[:n], true
		}
	}
	return b[:n], false
}
