package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/oci"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// compressOptions are the flags of compress.
type compressOptions struct {
	remoteOptions
	Memory        string
	Output        string
	Jobs          int
	MinSaving     float64
	SelfContained bool
	NoSync        bool
	PackMax       string
	Codec         string
}

func newCompressCommand(g *globals) *cobra.Command {
	var o compressOptions
	cmd := &cobra.Command{
		Use:   "compress SOURCE -o CACHE",
		Short: "Compress a safetensors checkpoint into a cache",
		Long: `Compress a checkpoint (a .safetensors file, a directory of shards, or a
model.safetensors.index.json) into a cache directory. A directory's index is
model.safetensors.index.json, else its only *.safetensors.index.json
(diffusers'); with several, name one. Subfolders are not entered: compress
says which hold .safetensors files (each is a checkpoint of its own), and
warns of tensor names that several shards hold. With --codec fixed (the
default) BF16 tensors become fixed-codec payloads (12 bits a value, decoded in
place on the GPU at load time); with --codec entropy every float tensor (BF16,
F16, F32, F8_E4M3, F8_E5M2) becomes an entropy payload (its exponents
Huffman-coded, near their entropy; decoded in place on the GPU at load time
too); with --codec auto BF16 tensors take fixed-codec payloads (entropy ones
where those would not pass) and the other float dtypes entropy payloads; with
--codec cost each tensor is stored as this host's cost model (splitzip
calibrate, measured on first use) predicts loads fastest from the page cache:
raw, fixed or entropy, a tensor's cost on this host against the bytes it
saves (on a GPU host small tensors stay raw; on a host without one, where
the profile prices decodes on the CPU, the choice may differ; inspect
--tensors says why a tensor was left raw).
Other dtypes, and tensors that
would not save at least --min-saving, are recorded as raw aliases of their
source slice. With the default codec, float tensors of other dtypes stay
raw, and compress says (a "hint:" line on stderr) what --codec auto would
store of them. The summary gives what is stored of a value of each float
dtype, in bits of that dtype's width. Jobs never exceed what --memory
admits at once (--json reports the job count). A cache may hold several
checkpoints; tensors they share are stored once.

CACHE may be remote: s3://bucket/prefix[:tag] or oci://registry/repository:tag.
The cache is then written self-contained into --local-cache (kept) or a
temporary folder (removed), and pushed there when it is whole: blobs the
bucket or registry holds already are not sent again (push's help says
more). As with a local cache, the checkpoint is added to what the tag
holds: a tag that exists is pulled into that folder first (fetching what
the folder lacks: all of it into a temporary folder, nothing into a kept
--local-cache that holds it), so the push keeps its checkpoints beside the
new one; a checkpoint compressed again replaces its own record. A tag that
holds something other than a splitzip cache is refused, not replaced. Two
runs onto one tag at once: the last push wins.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			return runCompress(cmd.Context(), g, o, a[0])
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.Output, "output", "o", "", "cache directory (created, or an existing cache to add to), or a remote cache: s3://bucket/prefix[:tag], oci://registry/repository:tag")
	f.IntVarP(&o.Jobs, "jobs", "j", 0, "tensors compressed at once (default: number of CPUs; never more than --memory admits)")
	atLeast(f, "jobs", 1, jobsHint)
	f.Float64Var(&o.MinSaving, "min-saving", pipeline.DefaultMinSaving, "store a tensor raw unless its payload makes it at least this fraction smaller")
	f.BoolVar(&o.SelfContained, "self-contained", false, "copy tensors left raw into the cache too, so decompress needs no source")
	addMemoryFlag(f, &o.Memory)
	f.StringVar(&o.Codec, "codec", pipeline.CodecFixed, "payloads: fixed (BF16, 12 bits a value), entropy (every float dtype), auto, or cost (each tensor as this host's cost model predicts loads fastest: raw, fixed or entropy)")
	f.StringVar(&o.PackMax, "pack-max", "256KiB", fmt.Sprintf("store objects of at most this size together in pack files (0: one file per object; at most %d MiB)", shardcache.MaxPackMax>>20))
	f.BoolVar(&o.NoSync, "no-sync", false, "do not wait for the disk before committing the index (faster; a power loss then needs a rebuild)")
	o.remoteOptions.addFlags(cmd)
	remoteFlag(cmd, "output")
	return cmd
}

func runCompress(ctx context.Context, g *globals, o compressOptions, src string) error {
	if o.Output == "" {
		return usageError{fmt.Errorf("compress needs -o CACHE")}
	}
	if o.Jobs < 0 {
		return usageError{fmt.Errorf("--jobs %d is refused: want at least 1; %s", o.Jobs, jobsHint)}
	}
	// Written so that NaN fails too.
	if !(o.MinSaving >= 0 && o.MinSaving < 1) {
		return usageError{fmt.Errorf("--min-saving %g is refused: want a fraction of at least 0 and below 1", o.MinSaving)}
	}
	switch o.Codec {
	case pipeline.CodecFixed, pipeline.CodecEntropy, pipeline.CodecAuto, pipeline.CodecCost:
	default:
		return usageError{fmt.Errorf("--codec must be fixed, entropy, auto or cost, got %q", o.Codec)}
	}
	mem, err := memoryBudget(o.Memory)
	if err != nil {
		return err
	}
	packMax, err := parseSize(o.PackMax)
	if err != nil {
		return usageError{fmt.Errorf("--pack-max: %v", err)}
	}
	if packMax > shardcache.MaxPackMax {
		return usageError{fmt.Errorf("--pack-max %s is refused: want at most %d MiB (0: one file per object)", o.PackMax, shardcache.MaxPackMax>>20)}
	}
	pm := int64(packMax)
	if packMax == 0 {
		pm = -1
	}
	var prof *costmodel.Profile
	if o.Codec == pipeline.CodecCost {
		// The source first: a bad one fails before a calibration.
		if _, err := pipeline.OpenSource(src); err != nil {
			return err
		}
		if prof, err = hostProfile(ctx, g, "", true); err != nil {
			return err
		}
	}
	out, done := o.Output, func() {}
	var existing *tagBase
	if isRemote(o.Output) {
		// The source first: a mistyped one fails before a pull of the
		// tag's checkpoints.
		if _, err := os.Stat(src); err != nil {
			return err
		}
		if out, done, err = o.local("compress"); err != nil {
			return err
		}
		defer done()
		o.SelfContained = true // a remote cache loads without the source
		// The tag's checkpoints join the local cache first: the push
		// replaces the tag's manifest with the local cache's.
		pulled, err := o.base(ctx, g, o.Output, out, o.NoSync || o.LocalCache == "")
		if err != nil {
			return err
		}
		if pulled != nil {
			existing = &tagBase{PullResult: *pulled}
		}
	}
	res, err := pipeline.Compress(ctx, src, pipeline.CompressOptions{
		Output: out, Jobs: o.Jobs, MinSaving: o.MinSaving, SelfContained: o.SelfContained, NoSync: o.NoSync, Memory: mem, Progress: g.progress(),
		PackMax: pm, Codec: o.Codec, Cost: prof,
	})
	if err != nil {
		return err
	}
	if existing != nil {
		existing.split(ctx, out, src)
	}
	if isRemote(o.Output) {
		// Where the cache goes: the local folder is a temporary one, gone
		// when the command ends, or --local-cache (the pull's cache).
		res.Output = o.Output
		if existing != nil && o.LocalCache == "" {
			existing.Cache = ""
		}
	}
	var pushed *oci.PushResult
	if isRemote(o.Output) {
		pr, err := oci.Push(ctx, out, remoteRef(o.Output), o.remoteOptions.oci(g))
		if err != nil {
			return registryError(err)
		}
		pushed = &pr
	}
	if g.JSON {
		// One document: a remote cache's pull and push ride in the summary.
		return printJSON(g.stdout, "compress_summary", struct {
			*pipeline.CompressResult
			Existing *tagBase        `json:"existing,omitempty"`
			Push     *oci.PushResult `json:"push,omitempty"`
			// The lines the text output gives on stderr.
			Hint string `json:"hint,omitempty"`
			Note string `json:"note,omitempty"`
		}{res, existing, pushed, strings.TrimPrefix(codecHint(res.DTypes), "hint: "), strings.TrimPrefix(keptNote(res.Totals, isRemote(o.Output)), "note: ")})
	}
	if len(res.Unindexed) > 0 {
		fmt.Fprintf(g.stderr, "note: %s in %s not named by its index (%s): not compressed (compress a file by its path to keep it too)\n",
			count(len(res.Unindexed), ".safetensors file"), res.Source, strings.Join(res.Unindexed, ", "))
	}
	if len(res.LeftOut) > 0 {
		fmt.Fprintf(g.stderr, "note: %s also holds %s: not part of this checkpoint, not compressed\n", res.Source, strings.Join(res.LeftOut, ", "))
	}
	if n := len(res.OtherFiles); n > 0 {
		// Not lost with the source unnoticed (trial 70).
		names := res.OtherFiles
		if n > 5 {
			names = append(names[:5:5], fmt.Sprintf("and %d more", n-5))
		}
		fmt.Fprintf(g.stderr, "note: %s also holds %s: the cache holds only the safetensors files and their index, so keep these beside it%s\n",
			res.Source, strings.Join(names, ", "), map[bool]string{true: " (decompress and load work without the source; these do not come back with it)"}[o.SelfContained])
	}
	if n := len(res.Duplicates); n > 0 {
		d := res.Duplicates[0]
		fmt.Fprintf(g.stderr, "warning: %s %s in more than one shard (first: %q in %s): the cache keeps and restores them, but a load, which serves tensors by name, refuses this checkpoint\n",
			count(n, "tensor name"), map[bool]string{true: "is", false: "are"}[n == 1], d.Name, strings.Join(d.Shards, " and "))
	}
	if n := len(res.Unnamed); n > 0 {
		fmt.Fprintf(g.stderr, "note: %s of the shards %s not named by the index (first: %s): compressed all the same\n",
			count(n, "tensor"), map[bool]string{true: "is", false: "are"}[n == 1], res.Unnamed[0])
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(g.stderr, "warning: %s (the reference safetensors loader refuses this)\n", w)
	}
	t := res.Totals
	secs := res.Duration.Seconds()
	fmt.Fprintf(g.stdout, "compressed %s (%s) from %s: %s -> %s (%.1f%% saved%s) in %.2fs, %.2f GB/s\n",
		count(t.Tensors, "tensor"), payloadKinds(t), count(res.Shards, "shard"), human(t.RawBytes), human(t.StoredBytes),
		100*(1-ratio(t.StoredBytes, t.RawBytes)), dtypeBits(res.DTypes), secs, float64(t.RawBytes)/secs/1e9)
	if h := codecHint(res.DTypes); h != "" {
		fmt.Fprintln(g.stderr, h)
	}
	if res.CostModel != "" {
		from := ""
		if file := profileFile(); file != "" {
			from = " in " + file + " (" + costmodel.EnvProfile + ")"
		}
		fmt.Fprintf(g.stderr, "note: --codec cost chose by the cost model%s of %s\n", from, res.CostModel)
	}
	if n := keptNote(res.Totals, isRemote(o.Output)); n != "" {
		fmt.Fprintln(g.stderr, n)
	}
	mendedNote(g, res.Mended, "stored")
	if res.StrayFiles > 0 {
		fmt.Fprintf(g.stderr, "note: the cache holds %s (%s) its index does not name, left by a run that was killed: 'splitzip gc %s' removes them\n",
			count(res.StrayFiles, "file"), human(res.StrayBytes), out)
	}
	if existing != nil {
		existing.print(g, o.Output)
	}
	if pushed != nil {
		printPushed(g, "the cache", *pushed)
	}
	return nil
}

// tagBase is what a remote cache's tag held before compress added a
// checkpoint to it: the artifact pulled into the local cache first, the
// checkpoints of it that the push keeps beside the new one, and the one
// compressed again, whose record the new one replaces.
type tagBase struct {
	oci.PullResult
	Kept     []string `json:"kept"`
	Replaced string   `json:"replaced,omitempty"`
}

// split sorts the tag's checkpoints into kept and replaced by the path
// that identifies the checkpoint src compressed into the cache dir.
func (b *tagBase) split(ctx context.Context, dir, src string) {
	var path string
	if c, err := shardcache.OpenContext(ctx, dir); err == nil {
		if i, err := c.Index().SourceFor(src); err == nil {
			path = c.Index().Sources[i].Path()
		}
		c.Close()
	}
	b.Kept = []string{}
	for _, s := range b.Sources {
		if s == path {
			b.Replaced = s
		} else {
			b.Kept = append(b.Kept, s)
		}
	}
}

// print says what the tag held and what of it the push keeps.
func (b *tagBase) print(g *globals, cache string) {
	var parts []string
	if len(b.Kept) > 0 {
		parts = append(parts, fmt.Sprintf("kept %s already at %s (%s)", count(len(b.Kept), "checkpoint"), cache, strings.Join(b.Kept, ", ")))
	}
	if b.Replaced != "" {
		parts = append(parts, fmt.Sprintf("replaced %s at %s (compressed again)", b.Replaced, cache))
	}
	rest := ""
	if b.Fetched < b.Blobs {
		rest = " (the local cache had the rest)"
	}
	fmt.Fprintf(g.stdout, "%s: pulled %s first, fetched %s, %s of %s%s\n", strings.Join(parts, "; "), b.Digest,
		count(b.Fetched, "blob"), human(b.FetchedBytes), human(b.Bytes), rest)
}

// dtypeBits lists what the cache stores of a value of each float dtype,
// in that dtype's own width: "; BF16 12.014 bits/value (of 16), F32 ...".
func dtypeBits(dtypes []pipeline.DTypeTotals) string {
	var parts []string
	for _, d := range dtypes {
		if d.Bits == 0 || !floatDType(d.DType) || d.RawBytes == 0 {
			continue // no values: no bits a value to say
		}
		parts = append(parts, fmt.Sprintf("%s %.3f bits/value (of %d)", d.DType, d.BitsPerValue, d.Bits))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// floatDType reports whether a codec of compress can shrink dtype.
func floatDType(dtype string) bool {
	switch dtype {
	case "BF16", "F16", "F32", "F8_E4M3", "F8_E5M2":
		return true
	}
	return false
}

// codecHint returns the line that says what --codec auto would save of
// the float dtypes the fixed codec left raw, or "" when it would save
// nothing worth saying.
func codecHint(dtypes []pipeline.DTypeTotals) string {
	var names []string
	var raw, auto uint64
	for _, d := range dtypes {
		if d.AutoBytes == 0 || d.AutoBytes >= d.AutoRawBytes {
			continue
		}
		names = append(names, d.DType)
		raw += d.AutoRawBytes
		auto += d.AutoBytes
	}
	if saving := 1 - ratio(auto, raw); len(names) == 0 || saving < 0.01 {
		return ""
	}
	return fmt.Sprintf("hint: the fixed codec (the default) codes only BF16 and left %s (%s) raw; --codec auto would store them in about %s, %.0f%% smaller",
		strings.Join(names, ", "), human(raw), human(auto), 100*(1-ratio(auto, raw)))
}

// keptNote returns the line that says how many tensors kept the payloads
// an earlier run into the same cache (remote: the tag) stored in another
// codec, and how many the raw copies an earlier --self-contained run
// stored, or "".
func keptNote(t pipeline.Totals, remote bool) string {
	var parts []string
	if t.KeptTensors > 0 {
		into := "compress into a new cache"
		if remote {
			into = "compress -o onto a new tag (this one's checkpoints share the tensors)"
		}
		parts = append(parts, fmt.Sprintf("%s (%s) kept the payloads an earlier run stored, which this --codec would not have (another codec's, or under --codec cost ones the model keeps raw): a tensor has one form in a cache; %s to store them with this --codec",
			count(t.KeptTensors, "tensor"), human(t.KeptBytes), into))
	}
	if t.KeptCopies > 0 {
		parts = append(parts, fmt.Sprintf("%s left raw (%s) kept the copies an earlier --self-contained run stored: the cache still holds them, as it did",
			count(t.KeptCopies, "tensor"), human(t.KeptCopyBytes)))
	}
	if len(parts) == 0 {
		return ""
	}
	return "note: " + strings.Join(parts, "; ")
}

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

// mendedNote tells of the objects a run found missing, cut short or
// damaged in the cache and replaced (did: "stored", "fetched").
func mendedNote(g *globals, ms []shardcache.Mend, did string) {
	if n := len(ms); n > 0 {
		fmt.Fprintf(g.stderr, "note: the cache held %s that %s missing, cut short or damaged; this run %s %s again (first: %s)\n",
			count(n, "object"), map[bool]string{true: "was", false: "were"}[n == 1], did, map[bool]string{true: "it", false: "them"}[n == 1], ms[0].Error)
	}
}
