package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitzip/splitzip/checkpoint"
	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
)

// DefaultMinSaving is the coverage gate: a BF16 tensor whose payload would
// not be at least this fraction smaller than its raw bytes stays raw.
const DefaultMinSaving = 0.03

// ErrOutputInSource reports an output path equal to or inside the source.
var ErrOutputInSource = errors.New("output is inside the source checkpoint")

// CompressOptions configures Compress.
type CompressOptions struct {
	Output        string  // cache directory
	Jobs          int     // tensors compressed at once; 0 means GOMAXPROCS
	MinSaving     float64 // coverage gate, a fraction in [0, 1)
	SelfContained bool    // also copy raw tensors into the cache
	NoSync        bool    // do not flush to disk before committing (see shardcache.Writer.SetNoSync)
	Memory        uint64  // memory budget in bytes; 0 means DefaultMemory
	// PackMax is the stored size at or below which objects are written
	// into pack files: 0 means shardcache.DefaultPackMax, negative none.
	PackMax int64
	// Codec chooses the payloads: CodecFixed (""), CodecEntropy,
	// CodecAuto or CodecCost.
	Codec string
	// Cost is the cost model CodecCost chooses by (nil: costmodel.Default).
	Cost     *costmodel.Profile
	Progress Progress
}

// Codecs of CompressOptions.Codec.
const (
	// CodecFixed stores BF16 tensors as fixed-codec payloads (12 bits a
	// value, decoded in place on the GPU) and leaves other dtypes raw.
	CodecFixed = "fixed"
	// CodecEntropy stores tensors of every float dtype (BF16, F16, F32,
	// F8_E4M3, F8_E5M2) as entropy payloads: near the entropy of their
	// exponents, decoded on the host.
	CodecEntropy = "entropy"
	// CodecAuto stores BF16 tensors as fixed-codec payloads (as entropy ones
	// when those fail the gate) and the other float dtypes as entropy
	// payloads.
	CodecAuto = "auto"
	// CodecCost stores each tensor as the kind its cost model
	// (CompressOptions.Cost) predicts loads fastest: raw, a fixed-codec
	// payload (BF16) or an entropy payload (float dtypes), among those
	// whose payload passes the gate. Small tensors, whose host cost a
	// load outweighs the bytes they save, stay raw.
	CodecCost = "cost"
)

// Totals sums a checkpoint's tensors.
type Totals struct {
	Tensors           int    `json:"tensors"`
	CompressedTensors int    `json:"compressed_tensors"` // payloads of either codec
	EntropyTensors    int    `json:"entropy_tensors"`
	RawBytes          uint64 `json:"raw_bytes"`    // all tensor bytes of the source
	StoredBytes       uint64 `json:"stored_bytes"` // payloads plus tensors left raw
	BF16Tensors       int    `json:"bf16_tensors"`
	BF16RawBytes      uint64 `json:"bf16_raw_bytes"`
	BF16StoredBytes   uint64 `json:"bf16_stored_bytes"`
	NewObjectBytes    uint64 `json:"new_object_bytes,omitempty"` // written by this run
	// CostRawTensors are the tensors --codec cost kept raw because the
	// cost model predicted them to load faster so, and CostRawBytes their
	// bytes.
	CostRawTensors int    `json:"cost_raw_tensors,omitempty"`
	CostRawBytes   uint64 `json:"cost_raw_bytes,omitempty"`
	// KeptTensors are the tensors an earlier run into the same cache
	// stored as payloads this run's codec would not store (another
	// codec's, or under --codec cost ones its model keeps raw): a tensor
	// has one form in a cache, so they keep it (compress into a new cache
	// to change it). KeptBytes is their raw bytes.
	KeptTensors int    `json:"kept_tensors,omitempty"`
	KeptBytes   uint64 `json:"kept_bytes,omitempty"`
	// KeptCopies are the tensors left raw whose copies an earlier run
	// (--self-contained) stored, kept by a run without --self-contained
	// (tensorCompressor.storeRaw); KeptCopyBytes their bytes.
	KeptCopies    int    `json:"kept_copies,omitempty"`
	KeptCopyBytes uint64 `json:"kept_copy_bytes,omitempty"`
}

// costRaw counts a tensor the cost model kept raw (by its reason).
func (t *Totals) costRaw(reason string, size uint64) {
	if strings.HasPrefix(reason, costmodel.ReasonPrefix) {
		t.CostRawTensors++
		t.CostRawBytes += size
	}
}

// CompressResult reports a Compress run.
type CompressResult struct {
	Source string `json:"source"` // the checkpoint's folder
	// Checkpoint is the path that names the checkpoint, as inspect's
	// (its index file, its one shard, or its folder: Source.Path).
	Checkpoint string `json:"checkpoint"`
	Output     string `json:"output"`
	Shards     int    `json:"shards"`
	// Jobs is how many tensors were compressed at once: --jobs, bounded
	// by the memory budget and the tensor count.
	Jobs int `json:"jobs"`
	// CostModel names the profile --codec cost chose by: its host
	// fingerprint and when it was measured ("default": the built-in one).
	CostModel string `json:"cost_model,omitempty"`
	Totals    Totals `json:"totals"`
	// DTypes sums the tensors per dtype, the dtype of the most bytes first.
	DTypes []DTypeTotals `json:"dtypes"`
	// Warnings lists what the sources have that the reference
	// safetensors implementation refuses and the cache keeps.
	Warnings []string `json:"warnings,omitempty"`
	// Unindexed names the .safetensors files beside the checkpoint's
	// index that it does not name, and so were not compressed.
	Unindexed []string `json:"unindexed,omitempty"`
	// LeftOut names what the folder compressed holds that is not part of the
	// checkpoint (other indexes, subfolders with .safetensors files).
	LeftOut []string `json:"left_out,omitempty"`
	// OtherFiles names the other files of the folder compressed
	// (config.json, a tokenizer), which the cache does not hold.
	OtherFiles []string `json:"other_files,omitempty"`
	// Duplicates are tensor names more than one shard holds: the cache
	// keeps and restores them, but a load, which serves tensors by name,
	// refuses the checkpoint.
	Duplicates []checkpoint.Duplicate `json:"duplicate_names,omitempty"`
	// Unnamed are the tensors ("shard: name") of an indexed checkpoint's
	// shards that its index does not name (compressed all the same).
	Unnamed []string `json:"unnamed_by_index,omitempty"`
	// StrayFiles are files in the cache's objects/ and tmp/ that its index
	// does not name (a killed run's objects; gc removes them), StrayBytes
	// their bytes.
	StrayFiles int    `json:"stray_files,omitempty"`
	StrayBytes uint64 `json:"stray_bytes,omitempty"`
	// Mended lists the objects the cache held that were missing, cut
	// short or damaged (as verify reports them) and that this run
	// stored again: compressing a checkpoint again mends its objects.
	Mended   []shardcache.Mend `json:"mended,omitempty"`
	Duration time.Duration     `json:"duration_ns"`
}

// validate checks the options before any work or output, wrapping
// ErrOption, and fills in the defaults.
func (o *CompressOptions) validate() error {
	if o.Output == "" {
		return fmt.Errorf("%w: no output directory", ErrOption)
	}
	if o.Jobs < 0 {
		return fmt.Errorf("%w: jobs must be at least 1 (0 for one a core), got %d", ErrOption, o.Jobs)
	}
	if o.Jobs == 0 {
		o.Jobs = runtime.GOMAXPROCS(0)
	}
	if o.PackMax > shardcache.MaxPackMax {
		return fmt.Errorf("%w: pack-max must be at most %d MiB (%d bytes), got %d bytes", ErrOption, shardcache.MaxPackMax>>20, shardcache.MaxPackMax, o.PackMax)
	}
	// Written so that NaN fails too.
	if !(o.MinSaving >= 0 && o.MinSaving < 1) {
		return fmt.Errorf("%w: min-saving must be a fraction in [0, 1), got %g", ErrOption, o.MinSaving)
	}
	if o.Memory != 0 && o.Memory < MinMemory {
		return fmt.Errorf("%w: memory budget of %d bytes is below the minimum of %d MiB", ErrOption, o.Memory, MinMemory>>20)
	}
	switch o.Codec {
	case "":
		o.Codec = CodecFixed
	case CodecFixed, CodecEntropy, CodecAuto:
	case CodecCost:
		if o.Cost == nil {
			o.Cost = costmodel.Default()
		}
		if err := o.Cost.Check(); err != nil {
			return fmt.Errorf("%w: %w", ErrOption, err)
		}
	default:
		return fmt.Errorf("%w: codec must be %s, %s, %s or %s, got %q", ErrOption, CodecFixed, CodecEntropy, CodecAuto, CodecCost, o.Codec)
	}
	o.Progress = orNop(o.Progress)
	return nil
}

// Compress compresses the checkpoint at src into the cache opts.Output.
// Nothing becomes visible in the cache unless the whole run succeeds, and
// a run that fails leaves a folder that was absent or empty before it as
// it was (shardcache.Writer.Discard, under the writer's lock: never what
// another run put there).
func Compress(ctx context.Context, src string, opts CompressOptions) (*CompressResult, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	_, err := os.Lstat(opts.Output)
	fresh := errors.Is(err, fs.ErrNotExist)
	ents, err := os.ReadDir(opts.Output)
	empty := err == nil && len(ents) == 0 // a folder made for it
	res, err := compressInto(ctx, src, opts, fresh || empty)
	if err != nil && fresh {
		os.Remove(opts.Output) // only where Discard left it empty
	}
	return res, err
}

// OpenSource opens the checkpoint src names for compressing, as Compress
// does first (a caller that has work to do before compressing checks the
// source with it first).
func OpenSource(src string) (*checkpoint.Checkpoint, error) {
	ck, err := checkpoint.Open(src)
	if errors.Is(err, checkpoint.ErrNoShards) && shardcache.IsCache(src) {
		return nil, fmt.Errorf("%w: %s is a splitzip cache, not a checkpoint (decompress restores the checkpoints it holds)", checkpoint.ErrNoShards, src)
	}
	return ck, err
}

// sourceHolding is what an output must stay out of when compressing ck,
// opened from src: a checkpoint of one file named by its path is that
// file (a cache may sit beside it in its folder), any other its folder,
// which holds its shards and index.
func sourceHolding(src string, ck *checkpoint.Checkpoint) string {
	if st, err := os.Stat(src); err == nil && st.Mode().IsRegular() && ck.IndexName == "" && len(ck.Shards) == 1 {
		return ck.Shards[0].Path
	}
	return ck.Root
}

// compressInto is Compress after its options are checked.
// With discard, a failed run discards what it wrote (Writer.Discard).
func compressInto(ctx context.Context, src string, opts CompressOptions, discard bool) (_ *CompressResult, err error) {
	start := time.Now()
	mem, err := newBudget(opts.Memory)
	if err != nil {
		return nil, err
	}
	ck, err := OpenSource(src)
	if err != nil {
		return nil, err
	}
	if in := sourceHolding(src, ck); checkpoint.Contains(in, opts.Output) {
		// A TensorError without a tensor: an error about a file, named
		// apart from the text for --json.
		return nil, &TensorError{File: opts.Output, Err: fmt.Errorf("%w %s", ErrOutputInSource, in)}
	}
	w, err := shardcache.Create(opts.Output)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && discard {
			w.Discard()
			return
		}
		w.Close()
	}()
	w.SetNoSync(opts.NoSync)
	w.SetPayloadCheck(CheckStoredPayload)
	switch {
	case opts.PackMax < 0:
		w.SetPackMax(0)
	case opts.PackMax > 0:
		w.SetPackMax(uint64(opts.PackMax))
	}

	res := &CompressResult{Source: ck.Root, Output: opts.Output, Shards: len(ck.Shards), Unindexed: ck.Unindexed,
		LeftOut: ck.LeftOut, OtherFiles: ck.Others, Duplicates: ck.Duplicates, Unnamed: ck.Unnamed}
	if opts.Codec == CodecCost {
		res.CostModel = opts.Cost.Host + ", measured " + opts.Cost.Measured
	}
	for _, s := range ck.Shards {
		for _, d := range s.Header.Deviations {
			res.Warnings = append(res.Warnings, s.Path+": "+d)
		}
	}
	src1 := shardcache.Source{Root: ck.Root, Created: time.Now().UTC(), MinSaving: opts.MinSaving}
	if ck.Index != nil {
		key, err := w.PutBytes(ck.Index.Raw)
		if err != nil {
			return nil, &TensorError{File: filepath.Join(ck.Root, ck.IndexName), Err: err}
		}
		src1.Index = &shardcache.File{Name: ck.IndexName, Size: uint64(len(ck.Index.Raw)), Key: key}
	}
	var total uint64
	var tensors int
	for _, s := range ck.Shards {
		tensors += len(s.Header.Tensors)
		for _, t := range s.Header.Tensors {
			total += t.Size()
		}
	}
	res.Jobs = mem.jobs(opts.Jobs, tensors, compressCost)
	opts.Progress.Start("compress", total)
	defer opts.Progress.Finish()
	shards := make([]*shardJob, len(ck.Shards))
	gapBuf := make([]byte, segmentBytes)
	for i, s := range ck.Shards {
		j, err := openShardJob(w, s, gapBuf)
		if err != nil {
			return nil, err
		}
		defer j.close()
		shards[i] = j
	}
	if err := compressTensors(ctx, w, shards, &opts, mem, res.Jobs); err != nil {
		return nil, err
	}
	dtypes := map[string]*DTypeTotals{}
	for _, j := range shards {
		if err := j.finish(w, &res.Totals, dtypes, opts.Codec, opts.SelfContained); err != nil {
			return nil, err
		}
		src1.Shards = append(src1.Shards, *j.rec)
	}
	res.DTypes = sortDTypes(dtypes)
	w.SetSource(src1)
	res.Checkpoint = src1.Path()
	// The flush to disk can take as long as the compression: say so.
	opts.Progress.Start("flushing to disk", 0)
	if err := w.Commit(); err != nil {
		return nil, err
	}
	// What a killed run left is not this run's to remove (gc does), but
	// it is said: a note, so an error counting it is not the run's.
	res.StrayFiles, res.StrayBytes, _ = w.Strays()
	res.Mended = shardcache.Mends(w.Mended())
	res.Duration = time.Since(start)
	return res, nil
}

// shardJob is one shard being compressed.
type shardJob struct {
	s   *checkpoint.Shard
	f   *os.File
	m   *source
	rec *shardcache.Shard
	// auto is, per tensor, about what --codec auto would store of it, where
	// the fixed codec left it raw by its dtype (see tensorCompressor.compress).
	auto []uint64
	// kept: tensors an earlier run stored as payloads of another codec,
	// kept as they are (tensorCompressor.compress).
	kept []bool
}

// openShardJob maps a shard and stores its header and gaps, streaming
// them through buf.
func openShardJob(w *shardcache.Writer, s *checkpoint.Shard, buf []byte) (*shardJob, error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, err
	}
	m, err := openSource(f, s)
	if err != nil {
		f.Close()
		return nil, err
	}
	j := &shardJob{s: s, f: f, m: m, auto: make([]uint64, len(s.Header.Tensors)), kept: make([]bool, len(s.Header.Tensors))}
	for i, t := range s.Header.Tensors {
		j.auto[i] = t.Size()
	}
	head := s.Header
	hkey, err := w.PutBytes(head.Header)
	if err != nil {
		j.close()
		return nil, &TensorError{File: s.Path, Err: fmt.Errorf("its header: %w", err)}
	}
	j.rec = &shardcache.Shard{Name: s.Name, Size: s.Size, ModTime: s.ModTime,
		Header:  shardcache.Region{Offset: 0, Size: uint64(len(head.Header)), Key: hkey},
		Tensors: make([]shardcache.Tensor, len(head.Tensors))}
	// Stored: its bytes are not needed again (the parsed tensors hold
	// copies of their names), and a header of many tensors is large (91 MB
	// of a 760,000-tensor shard's 140).
	head.Header = nil
	// Bytes not covered by the header or a tensor are kept as gaps.
	pos := head.DataStart
	addGap := func(end uint64) error {
		if end <= pos {
			return nil
		}
		key, err := w.PutFrom(f, pos, end-pos, buf)
		if err != nil {
			return &TensorError{File: s.Path, Err: fmt.Errorf("bytes [%d, %d) outside any tensor: %w", pos, end, err)}
		}
		j.rec.Gaps = append(j.rec.Gaps, shardcache.Region{Offset: pos, Size: end - pos, Key: key})
		return nil
	}
	for _, t := range head.Tensors {
		if err := addGap(t.Begin); err != nil {
			j.close()
			return nil, err
		}
		pos = max(pos, t.End)
	}
	if err := addGap(s.Size); err != nil {
		j.close()
		return nil, err
	}
	return j, nil
}

func (j *shardJob) close() {
	j.f.Close()
}

// compressTensors runs the tensors of all shards through jobs workers,
// each holding its share of the memory budget while it works.
func compressTensors(ctx context.Context, w *shardcache.Writer, shards []*shardJob, opts *CompressOptions, mem *budget, jobs int) error {
	// Tensor k of the run is tensor k-starts[s] of shard s. Workers take
	// the next k from a shared counter, in order: no list of tasks and no
	// hand-off per tensor, which cost more than a small tensor's work.
	starts := make([]int, len(shards)+1)
	for s, j := range shards {
		starts[s+1] = starts[s] + len(j.s.Header.Tensors)
	}
	n := starts[len(shards)]
	var next atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range jobs {
		wg.Go(func() {
			tc := newTensorCompressor(w, opts)
			s := 0
			for ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= n {
					return
				}
				for k >= starts[s+1] {
					s++
				}
				j, i := shards[s], k-starts[s]
				t := &j.s.Header.Tensors[i]
				release, err := mem.hold(ctx, compressCost+tableBytes(t.Size()))
				if err == nil {
					r := j.m.reader()
					err = tc.compress(r, t, &j.rec.Tensors[i], &j.auto[i], &j.kept[i])
					r.close()
					release()
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, &TensorError{File: j.s.Path, Tensor: t.Name, Err: err})
					mu.Unlock()
					cancel()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return firstOf(errs)
	}
	return ctx.Err()
}

// firstOf returns the first of jobs' errors, saying how many more jobs
// failed (a full disk fails every job writing at the time); errors of
// jobs stopped by the first one's failure are not counted.
func firstOf(errs []error) error {
	more := 0
	for _, err := range errs[1:] {
		if !errors.Is(err, context.Canceled) {
			more++
		}
	}
	if more == 0 {
		return errs[0]
	}
	if more == 1 {
		return fmt.Errorf("%w (and 1 more tensor failed too)", errs[0])
	}
	return fmt.Errorf("%w (and %d more tensors failed too)", errs[0], more)
}

// finish checks that the shard did not change while it was read, and
// fingerprints and sums it, into tot and per dtype into dtypes.
func (j *shardJob) finish(w *shardcache.Writer, tot *Totals, dtypes map[string]*DTypeTotals, codecName string, selfContained bool) error {
	sh := j.rec
	if err := shardcache.CheckStat(sh, j.s.Path); err != nil {
		return err
	}
	sh.Fingerprint = shardcache.Fingerprint(sh)
	for i, t := range sh.Tensors {
		tot.Tensors++
		tot.RawBytes += t.Size
		stored := t.Size
		if t.Payload() {
			tot.CompressedTensors++
			if t.Stored == shardcache.StoredEntropy {
				tot.EntropyTensors++
			}
			// Recorded, not Has: a payload found damaged that a tensor
			// of another form could not mend stays (TestMendOtherForm).
			o, ok := w.Recorded(t.Key)
			if !ok {
				return fmt.Errorf("%s: tensor %s: payload %s: not stored", j.s.Path, t.Name, t.Key)
			}
			stored = o.Size
			if j.kept[i] {
				tot.KeptTensors++
				tot.KeptBytes += t.Size
			}
		} else if t.CopyStored && !selfContained && j.kept[i] {
			// A copy an earlier run stored, not one of this run's gaps
			// of the same bytes.
			tot.KeptCopies++
			tot.KeptCopyBytes += t.Size
		}
		tot.StoredBytes += stored
		tot.costRaw(t.Reason, t.Size)
		if t.DType == "BF16" {
			tot.BF16Tensors++
			tot.BF16RawBytes += t.Size
			tot.BF16StoredBytes += stored
		}
		d := dtypes[t.DType]
		if d == nil {
			d = &DTypeTotals{DType: t.DType}
			d.Bits, _ = safetensors.DTypeBits(t.DType)
			dtypes[t.DType] = d
		}
		d.Tensors++
		d.RawBytes += t.Size
		d.StoredBytes += stored
		if codecName == CodecFixed && t.DType != "BF16" && len(entropyFields(t.DType, 0)) > 0 && !t.Payload() {
			d.AutoBytes += j.auto[i]
			d.AutoRawBytes += t.Size
		}
	}
	return nil
}

// DTypeTotals sums the tensors of one dtype.
type DTypeTotals struct {
	DType       string `json:"dtype"`
	Tensors     int    `json:"tensors"`
	RawBytes    uint64 `json:"raw_bytes"`
	StoredBytes uint64 `json:"stored_bytes"`
	// Bits is the dtype's width, bits a value (0 for a dtype of unknown
	// width).
	Bits uint64 `json:"bits"`
	// BitsPerValue is what the cache stores of a value on average, of
	// Bits: Bits for a dtype left raw.
	BitsPerValue float64 `json:"bits_per_value"`
	// AutoBytes, where the fixed codec left tensors of a float dtype
	// other than BF16 raw (AutoRawBytes of them; not those that kept an
	// earlier run's payloads), is about what --codec auto would store of
	// them (their raw size for those it would leave raw too).
	AutoBytes uint64 `json:"auto_bytes,omitempty"`
	// AutoRawBytes is the raw size of the tensors AutoBytes counts.
	AutoRawBytes uint64 `json:"auto_raw_bytes,omitempty"`
}

// sortDTypes returns the totals of dtypes, the dtype of the most bytes
// first, with their bits per value.
func sortDTypes(dtypes map[string]*DTypeTotals) []DTypeTotals {
	out := make([]DTypeTotals, 0, len(dtypes))
	for _, d := range dtypes {
		if d.RawBytes > 0 {
			d.BitsPerValue = float64(d.Bits) * float64(d.StoredBytes) / float64(d.RawBytes)
		}
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b DTypeTotals) int {
		if c := cmp.Compare(b.RawBytes, a.RawBytes); c != 0 {
			return c
		}
		return strings.Compare(a.DType, b.DType)
	})
	return out
}
