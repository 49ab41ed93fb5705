package codec

// encTables holds, for the vector encoder, each codebook exponent and its
// code broadcast to 32 bytes.
type encTables struct {
	exps      [CodebookSize][32]byte
	codes     [CodebookSize][32]byte
	codeTable [256]byte // exponent to code, escapeCode outside the codebook
}

func newEncTables(cb *Codebook) *encTables {
	t := &encTables{codeTable: cb.codeTable()}
	for k, e := range cb {
		for i := range 32 {
			t.exps[k][i] = e
			t.codes[k][i] = byte(k)
		}
	}
	return t
}
