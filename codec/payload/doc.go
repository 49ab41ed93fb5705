// Package payload is the one shape of a tensor's stored payload, whatever
// codec made it: the fixed codec's (package codec: BF16 exponents as
// 4-bit codes with escapes) or the entropy codec's (package
// codec/entropy: Huffman-coded fields of any float dtype). A Head is a
// payload's parsed and checked header: its sizes, its checksum, whether
// it decodes in place, how to decode it on the host; engines find the
// parameters of a device decode by its concrete type (*Fixed, *Entropy).
// Every reader of a payload, whole or in pieces, checks it here
// (Check, CheckBytes), so a payload is held to one set of rules and its
// errors say what was found and what was wanted.
package payload
