package shardcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"time"

	"lukechampine.com/blake3"
)

// Index format constants.
const (
	// IndexName is the index file in a cache directory.
	IndexName = "splitzip.json"
	// BackupName is the copy of the index each commit writes after it
	// (since 2026-12-07, stop 69): where the index is damaged past its
	// header and the backup is of the same commit (readBackup), the cache
	// is read from it, and the next writer mends the index. A damaged
	// index had lost every checkpoint of a self-contained cache whose
	// sources were gone.
	BackupName = "splitzip.json.backup"
	// FormatName identifies a splitzip cache index.
	FormatName = "splitzip-cache"
	// IndexVersion is the index format this package writes: 2 added pack
	// objects, 3 entropy payloads, 4 writes the same content as a compact
	// binary table instead of JSON (index_binary.go), and 5 moves the
	// statistics (ObjectStats, TensorStats) out of the body into a
	// section of their own that a load does not read. It reads versions
	// 1 to 5. The file keeps its name, so that a build older than
	// version 4 refuses the cache as corrupt rather than taking it for
	// one whose first compress was interrupted.
	IndexVersion = 5
	// minIndexVersion is the oldest index format this package reads.
	minIndexVersion = 1
	// maxIndexSize bounds the index read into memory.
	maxIndexSize = 1 << 30
)

// Object kinds.
const (
	KindFixed   = "splitzip" // a fixed-codec BF16 payload (package codec); the value is the on-disk name
	KindEntropy = "entropy"  // an entropy payload (codec/entropy), index version 3
	KindRaw     = "raw"      // bytes stored as they are
)

// Errors callers test with errors.Is.
var (
	// ErrNotCache reports a directory that is not a splitzip cache.
	ErrNotCache = errors.New("not a splitzip cache")
	// ErrIndexCorrupt reports an index whose checksum or content is invalid.
	ErrIndexCorrupt = errors.New("splitzip cache index is corrupt")
	// ErrOtherForm reports bytes that must be stored raw (a shard
	// header, a gap, an index file) which the cache holds as a payload,
	// another tensor's of the same bytes: a key names one object in a
	// cache.
	ErrOtherForm = errors.New("the cache holds bytes of this checkpoint in another form")
	// ErrIndexLost reports a cache whose index is gone but whose backup
	// (BackupName) is there: moved aside or deleted by hand, as no run
	// leaves it; readers and writers refuse it until the index is
	// restored.
	ErrIndexLost = errors.New("the cache's index is missing, its backup is there")
	// ErrNotFound reports a key or slice the cache does not hold.
	ErrNotFound = errors.New("not in the cache")
	// ErrObjectCorrupt reports an object whose size or hash is wrong.
	ErrObjectCorrupt = errors.New("cache object is corrupt")
	// ErrCacheGone reports an object file missing because the cache's
	// whole folder (its index or its objects folder) is, not the file
	// alone: a cache removed or moved while it was open. A read that
	// overlaps a removal still under way (objects gone, the folders not
	// yet) reports ErrObjectCorrupt.
	ErrCacheGone = errors.New("the cache's folder was removed or moved while it was open")
	// ErrSourceChanged reports a source shard that differs from the one compressed.
	ErrSourceChanged = errors.New("source shard changed")
	// ErrSourceTime is ErrSourceChanged for a shard of the same size
	// whose modification time differs: perhaps a copy of the same bytes
	// (Rehash tells).
	ErrSourceTime = fmt.Errorf("%w", ErrSourceChanged)
	// ErrLocked reports a cache another command holds: a writer, for a
	// writer; a gc, for a reader that waited for it.
	ErrLocked = errors.New("cache is locked")
	// ErrInUse reports a gc refused because a reader has the cache open
	// (Open, until Close): removing files then could fail it midway.
	ErrInUse = errors.New("the cache is open in a process that reads it; gc removes nothing while one does")
	// ErrPinCorrupt reports a pin file (Writer.Pin) that does not parse:
	// gc keeps what it cannot read rather than remove what it may pin.
	ErrPinCorrupt = errors.New("pin file is corrupt")
	// ErrVersion reports an index of a format version this build does
	// not read.
	ErrVersion = errors.New("unsupported splitzip cache index version")
	// ErrNotSelfContained reports a cache some of whose tensors have
	// their bytes only in their source (compress --self-contained copies
	// them in).
	ErrNotSelfContained = errors.New("the cache is not self-contained")
	// ErrStraysLeft says a gc stopped after it committed the cache's new
	// index: what it forgot is gone, the files no index names that it had
	// not removed yet are left for the next gc.
	ErrStraysLeft = errors.New("gc committed the cache's new index, and left the files it had not removed yet for the next gc")
)

// Key is a content key: "blake3:" and the hex BLAKE3-256 hash of the raw
// bytes. BLAKE3 is collision resistant like SHA-256 and hashes 4.2 GB/s on
// one core of the development machine against SHA-256's 1.9 (with SHA-NI),
// which matters because compress hashes every byte of the checkpoint.
type Key string

// KeyPrefix starts every content key.
const KeyPrefix = "blake3:"

// KeyOf returns the content key of b.
func KeyOf(b []byte) Key { return KeyFromSum(blake3.Sum256(b)) }

// KeyFromSum returns the key for a BLAKE3-256 sum.
func KeyFromSum(sum [32]byte) Key { return Key(KeyPrefix + hex.EncodeToString(sum[:])) }

// NewHasher returns a streaming hasher whose 32-byte sum KeyFromSum turns
// into a key.
func NewHasher() hash.Hash { return blake3.New(32, nil) }

// hexPart returns the hex digest, or an error for a malformed key.
func (k Key) hexPart() (string, error) {
	const p = KeyPrefix
	s := string(k)
	if len(s) != len(p)+64 || s[:len(p)] != p {
		return "", fmt.Errorf("%w: malformed key %q", ErrIndexCorrupt, s)
	}
	for _, r := range s[len(p):] { // hex digits, without decoding them
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') && (r < 'A' || r > 'F') {
			return "", fmt.Errorf("%w: malformed key %q", ErrIndexCorrupt, s)
		}
	}
	return s[len(p):], nil
}

// Object describes one stored object: what a reader needs to find its
// bytes and check them, and the statistics compress recorded.
type Object struct {
	Kind    string `json:"kind"`
	Size    uint64 `json:"size"`     // stored bytes
	RawSize uint64 `json:"raw_size"` // bytes it decodes to
	// Checksum is a payload's CRC-32C (its header's checksum field), or
	// a raw object's, of its bytes (written since 2026-12-07). 0 is none
	// recorded (an older build's raw object): readers check such a copy
	// against its content key instead.
	Checksum uint32 `json:"crc32c,omitempty"`
	// Pack, for an object stored in a pack (version 2), is the pack's
	// key; its bytes are [Offset, Offset+Size) of the pack.
	Pack   Key    `json:"pack,omitempty"`
	Offset uint64 `json:"offset,omitempty"`
	ObjectStats
}

// ObjectStats are the codec statistics compress records for a payload,
// for inspect to report. Loads never need them (a payload's header holds
// what decoding needs), so index version 5 keeps them in a section of
// their own that opening a cache leaves undecoded: they are zero until
// Index.LoadStats. Embedded in Object, so that they read as its fields
// and versions 1 to 3 keep their JSON.
type ObjectStats struct {
	// fixed-codec payloads (and Values, Chunks, Entropy and InPlace of
	// entropy payloads too):
	Values     uint64  `json:"values,omitempty"`
	Codebook   []int   `json:"codebook,omitempty"`
	Escapes    uint64  `json:"escapes,omitempty"`
	RawChunks  uint64  `json:"raw_chunks,omitempty"`
	Chunks     uint64  `json:"chunks,omitempty"`
	Coverage   float64 `json:"coverage,omitempty"`
	Entropy    float64 `json:"exponent_entropy,omitempty"`
	InPlace    bool    `json:"in_place,omitempty"`
	EscapeRate float64 `json:"escape_rate,omitempty"`
	// Field, for an entropy payload, is the field it codes (such as
	// "BF16 exponent" or "F8_E4M3 byte"); Entropy is then that field's
	// entropy in bits a value.
	Field string `json:"field,omitempty"`
}

// MaxEntropyRatio bounds how many raw bytes an entropy payload of one
// byte may decode to.
const MaxEntropyRatio = 2048

// Stored values of Tensor.Stored.
const (
	StoredFixed   = "splitzip" // compressed; Key names a fixed-codec object (on-disk name kept)
	StoredEntropy = "entropy"  // entropy-coded; Key names an entropy object
	StoredRaw     = "raw"      // left to the raw path; Key names the raw bytes
)

// Tensor is one tensor of a source shard.
type Tensor struct {
	Name   string   `json:"name"`
	DType  string   `json:"dtype"`
	Shape  []uint64 `json:"shape"`
	Offset uint64   `json:"offset"` // absolute, in the shard file
	Size   uint64   `json:"size"`
	Key    Key      `json:"key"`
	Stored string   `json:"stored"`
	// CopyStored says whether the raw bytes are in the cache as an object
	// (always for splitzip tensors, through their payload).
	CopyStored bool `json:"copy_stored,omitempty"`
	TensorStats
}

// TensorStats say why a tensor stayed raw, for inspect to report. Loads
// never need them; index version 5 keeps them beside ObjectStats, zero
// until Index.LoadStats. Embedded in Tensor, as ObjectStats in Object.
type TensorStats struct {
	Reason string `json:"reason,omitempty"` // why a tensor stayed raw
	// Exponent statistics of a BF16 tensor left raw (payloads keep theirs
	// in their object), so inspect can explain why it was not compressed.
	Coverage float64 `json:"coverage,omitempty"`
	Entropy  float64 `json:"exponent_entropy,omitempty"`
}

// Region is a byte range of a shard that is not a tensor: the header, or a gap.
type Region struct {
	Offset uint64 `json:"offset"`
	Size   uint64 `json:"size"`
	Key    Key    `json:"key"`
}

// Shard is one source safetensors file.
type Shard struct {
	Name        string    `json:"name"` // file name relative to the source root
	Size        uint64    `json:"size"`
	ModTime     time.Time `json:"mtime"`
	Fingerprint string    `json:"fingerprint"` // see Fingerprint
	Header      Region    `json:"header"`
	Tensors     []Tensor  `json:"tensors"`
	Gaps        []Region  `json:"gaps,omitempty"`
}

// Source is one checkpoint compressed into the cache.
type Source struct {
	Root      string    `json:"root"` // absolute directory of the shards
	Index     *File     `json:"index,omitempty"`
	Shards    []Shard   `json:"shards"`
	Created   time.Time `json:"created"`
	MinSaving float64   `json:"min_saving"`
}

// File is a small file stored whole (a checkpoint's index.json).
type File struct {
	Name string `json:"name"`
	Size uint64 `json:"size"`
	Key  Key    `json:"key"`
}

// Index is the content of splitzip.json.
type Index struct {
	Sources []Source        `json:"sources"`
	Objects map[Key]*Object `json:"objects"`
	// stats is a version 5 index's statistics section, not decoded yet
	// (LoadStats); nil once it is, and for every other index.
	stats *statsSection
}

// envelope is the file: the body's bytes and their hash, so a flipped byte
// anywhere in the index is detected.
type envelope struct {
	Format  string          `json:"format"`
	Version int             `json:"version"`
	SHA256  string          `json:"body_sha256"`
	Body    json.RawMessage `json:"body"`
}

// version is the oldest JSON index version that holds ix: 3 with entropy
// payloads, else 2.
func (ix *Index) version() int {
	for _, o := range ix.Objects {
		if o.Kind == KindEntropy {
			return 3
		}
	}
	return 2
}

// marshalIndex encodes ix as an index file of IndexVersion.
func marshalIndex(ix *Index) ([]byte, error) { return marshalBinaryIndex(ix) }

// marshalIndexJSON encodes ix as a JSON index file of the oldest version
// that holds it (2 or 3), as builds before version 4 wrote them.
func marshalIndexJSON(ix *Index) ([]byte, error) {
	body, err := json.Marshal(ix)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	out, err := json.MarshalIndent(envelope{Format: FormatName, Version: ix.version(), SHA256: hex.EncodeToString(sum[:]), Body: body}, "", " ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// unmarshalIndex decodes an index file of any version this build reads
// and checks its references; name is the file, for errors.
func unmarshalIndex(b []byte, name string) (*Index, error) {
	if bytes.HasPrefix(b, []byte(indexMagic)) {
		ix, err := unmarshalBinaryIndex(b, name)
		if err != nil {
			return nil, err
		}
		if err := ix.check(); err != nil {
			return nil, &IndexError{name, -1, err.Error()}
		}
		return ix, nil
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		// Neither form: a damaged magic (or another file in its place).
		return nil, &IndexError{name, 0, fmt.Sprintf("bad magic %q: neither a binary index (%q) nor a JSON one", b[:min(len(b), len(indexMagic))], indexMagic)}
	}
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", name, ErrIndexCorrupt, err)
	}
	if env.Format != FormatName {
		return nil, fmt.Errorf("%s: %w: format %q", name, ErrNotCache, env.Format)
	}
	if env.Version >= binaryIndexVersion && env.Version <= IndexVersion {
		return nil, &IndexError{name, -1, fmt.Sprintf("version %d in JSON; versions from %d on are binary", env.Version, binaryIndexVersion)}
	}
	if env.Version < minIndexVersion || env.Version > IndexVersion {
		return nil, fmt.Errorf("%s: %w: version %d; this build reads versions %d to %d", name, ErrVersion, env.Version, minIndexVersion, IndexVersion)
	}
	// MarshalIndent re-indents the body; compact it back before hashing.
	body, err := compactJSON(env.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", name, ErrIndexCorrupt, err)
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return nil, fmt.Errorf("%s: %w: body checksum mismatch", name, ErrIndexCorrupt)
	}
	var ix Index
	if err := json.Unmarshal(body, &ix); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", name, ErrIndexCorrupt, err)
	}
	if err := ix.check(); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", name, ErrIndexCorrupt, err)
	}
	for k, o := range ix.Objects {
		switch {
		case env.Version < 2 && (o.Kind == KindPack || o.Pack != ""):
			return nil, fmt.Errorf("%s: %w: object %s: packs are version 2, the index is version %d", name, ErrIndexCorrupt, k, env.Version)
		case env.Version < 3 && o.Kind == KindEntropy:
			return nil, fmt.Errorf("%s: %w: object %s: entropy payloads are version 3, the index is version %d", name, ErrIndexCorrupt, k, env.Version)
		}
	}
	return &ix, nil
}

// check verifies the index's internal references.
func (ix *Index) check() error {
	if ix.Objects == nil {
		ix.Objects = map[Key]*Object{}
	}
	for k, o := range ix.Objects {
		if _, err := k.hexPart(); err != nil {
			return err
		}
		if o == nil || (o.Kind != KindFixed && o.Kind != KindEntropy && o.Kind != KindRaw && o.Kind != KindPack) {
			return fmt.Errorf("object %s has no valid kind", k)
		}
		// A fixed-codec payload stores at least 12 bits a value, so it never
		// decodes to more than twice its size; an entropy payload at least
		// 10 bytes a chunk of 16,384 bytes (FP8 coded whole, constant
		// chunks), so never to more than MaxEntropyRatio times; a raw
		// object is its own bytes. Every size read from the index is
		// bounded by the size of a file on disk before anything is
		// allocated for it.
		switch o.Kind {
		case KindFixed:
			if o.RawSize/2 > o.Size {
				return fmt.Errorf("object %s: %d stored bytes cannot hold %d raw bytes", k, o.Size, o.RawSize)
			}
			if o.RawSize%2 != 0 {
				return fmt.Errorf("object %s: a fixed-codec payload of %d raw bytes, not a whole number of BF16 values", k, o.RawSize)
			}
		case KindEntropy:
			if o.RawSize/MaxEntropyRatio > o.Size {
				return fmt.Errorf("object %s: %d stored bytes cannot hold %d raw bytes", k, o.Size, o.RawSize)
			}
		default:
			if o.RawSize != o.Size {
				return fmt.Errorf("object %s: %d stored bytes cannot hold %d raw bytes", k, o.Size, o.RawSize)
			}
		}
		if err := o.checkStats(k); err != nil {
			return err
		}
		if o.Pack == "" {
			if o.Offset != 0 {
				return fmt.Errorf("object %s: an offset without a pack", k)
			}
			continue
		}
		// A member lies inside its pack, aligned; packs do not nest.
		p := ix.Objects[o.Pack]
		switch {
		case o.Kind == KindPack:
			return fmt.Errorf("pack %s is a member of another pack", k)
		case p == nil || p.Kind != KindPack:
			return fmt.Errorf("object %s: pack %s missing", k, o.Pack)
		case o.Offset%PackAlign != 0 || o.Offset > p.Size || o.Size > p.Size-o.Offset:
			return fmt.Errorf("object %s: bytes [%d, +%d) do not lie aligned inside the %d-byte pack %s", k, o.Offset, o.Size, p.Size, o.Pack)
		}
	}
	// Sources name members and whole objects, never packs.
	obj := func(k Key) *Object {
		if o := ix.Objects[k]; o != nil && o.Kind != KindPack {
			return o
		}
		return nil
	}
	// within reports a byte range that does not fit a file of size bytes,
	// without overflow.
	within := func(off, n, size uint64) bool { return off <= size && n <= size-off }
	for _, s := range ix.Sources {
		if s.Index != nil {
			if o := obj(s.Index.Key); o == nil || o.Kind != KindRaw || o.Size != s.Index.Size {
				return fmt.Errorf("source %s: index object %s missing, not a raw object, or not %d bytes", s.Root, s.Index.Key, s.Index.Size)
			}
		}
		for _, sh := range s.Shards {
			regions := append([]Region{sh.Header}, sh.Gaps...)
			for i, r := range regions {
				what := "header"
				if i > 0 {
					what = fmt.Sprintf("gap at %d", r.Offset)
				}
				if o := obj(r.Key); o == nil || o.Kind != KindRaw || o.Size != r.Size {
					return fmt.Errorf("shard %s: %s: raw object %s missing, not a raw object, or not %d bytes", sh.Name, what, r.Key, r.Size)
				}
				if !within(r.Offset, r.Size, sh.Size) {
					return fmt.Errorf("shard %s: %s: bytes [%d, +%d) lie outside the %d-byte file", sh.Name, what, r.Offset, r.Size, sh.Size)
				}
			}
			for _, t := range sh.Tensors {
				if !within(t.Offset, t.Size, sh.Size) {
					return fmt.Errorf("shard %s: tensor %q: bytes [%d, +%d) lie outside the %d-byte file", sh.Name, t.Name, t.Offset, t.Size, sh.Size)
				}
				o := obj(t.Key)
				switch {
				case t.Stored == StoredFixed && (o == nil || o.Kind != KindFixed):
					return fmt.Errorf("shard %s: tensor %q: payload %s missing", sh.Name, t.Name, t.Key)
				case t.Stored == StoredFixed && o.RawSize != t.Size:
					return fmt.Errorf("shard %s: tensor %q: payload %s decodes to %d bytes, the tensor has %d", sh.Name, t.Name, t.Key, o.RawSize, t.Size)
				case t.Stored == StoredEntropy && (o == nil || o.Kind != KindEntropy):
					return fmt.Errorf("shard %s: tensor %q: entropy payload %s missing", sh.Name, t.Name, t.Key)
				case t.Stored == StoredEntropy && o.RawSize != t.Size:
					return fmt.Errorf("shard %s: tensor %q: entropy payload %s decodes to %d bytes, the tensor has %d", sh.Name, t.Name, t.Key, o.RawSize, t.Size)
				case t.Stored == StoredRaw && t.CopyStored && (o == nil || o.Kind != KindRaw || o.Size != t.Size):
					return fmt.Errorf("shard %s: tensor %q: raw object %s missing, not a raw object, or not %d bytes", sh.Name, t.Name, t.Key, t.Size)
				case t.Stored != StoredFixed && t.Stored != StoredEntropy && t.Stored != StoredRaw:
					return fmt.Errorf("shard %s: tensor %q: stored as %q", sh.Name, t.Name, t.Stored)
				}
			}
		}
	}
	return nil
}

// checkStats checks what of an object's statistics the rest of its
// record determines: a fixed-codec payload's values, when recorded, are
// half its raw bytes. Zero is not recorded: the statistics of a version
// 5 index before LoadStats, or of one written without them.
func (o *Object) checkStats(k Key) error {
	if o.Kind == KindFixed && o.Values != 0 && o.Values != o.RawSize/2 {
		return fmt.Errorf("object %s: %d values, the payload decodes to %d bytes", k, o.Values, o.RawSize)
	}
	return nil
}

func compactJSON(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
