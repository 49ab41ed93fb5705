package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// inspectOptions are the flags of inspect.
type inspectOptions struct {
	Tensors bool
	Bits    bool
	Cost    bool
}

func newInspectCommand(g *globals) *cobra.Command {
	var o inspectOptions
	cmd := &cobra.Command{
		Use:   "inspect CACHE",
		Short: "Explain what a cache saves, in total and per tensor",
		Long: `Explain what a cache saves: per dtype, the tensors stored as fixed-codec
payloads, as entropy payloads and raw, the bytes and bits a value stored
against the exponents' entropy bound; with --tensors every tensor, with
--bits where entropy payloads' bits go; with --cost what this host's cost
model (splitzip calibrate) predicts a load from the page cache takes in a
warm process (the fastest of repeated loads, which calibrate fits; a new
process adds its start-up), as stored and all raw. In --json the count of fixed-codec payloads keeps the
key "splitzip_tensors" of earlier releases, and a tensor's "stored" the
on-disk name "splitzip" for a fixed-codec payload ("fixed" in the table).

Columns of --tensors: stored (fixed, entropy or raw), bits/value (stored
bits a value), bound (the bits a value with the exponents stored by an
ideal coder, the rest as it is: an entropy payload stores less where the
other bits are constant over a chunk), coverage (the share of values whose
exponent is one of the tensor's 16 coded exponents; "-" for entropy
payloads, which code every exponent), escapes (the share that is not),
exp-entropy (the entropy of the exponents alone, bits a value), why raw
(why a tensor was left raw). The summary gives, per dtype, tensor counts
(all, fixed, entropy) and sizes (raw, stored).`,
		Args: localCache(args(cobra.ExactArgs(1))),
		RunE: func(cmd *cobra.Command, a []string) error {
			return runInspect(cmd.Context(), g, o, a[0])
		},
	}
	cmd.Flags().BoolVar(&o.Tensors, "tensors", false, "list every tensor, largest first")
	cmd.Flags().BoolVar(&o.Cost, "cost", false, "predict a load from the page cache in a warm process by this host's cost model (splitzip calibrate makes it)")
	cmd.Flags().BoolVar(&o.Bits, "bits", false, "say where entropy payloads' bits go (reads each one's head, chunk index and chunk headers)")
	return cmd
}

func runInspect(ctx context.Context, g *globals, o inspectOptions, dir string) error {
	opts := pipeline.InspectOptions{Tensors: o.Tensors, Bits: o.Bits}
	if o.Cost {
		p, err := hostProfile(ctx, g, "", false)
		if err != nil {
			return err
		}
		opts.Cost = p
	}
	res, err := pipeline.Inspect(ctx, dir, opts)
	if err != nil {
		return err
	}
	warnBackup(g, res.IndexDamaged)
	if g.JSON {
		return printJSON(g.stdout, "inspect", res)
	}
	w := g.stdout
	for _, s := range res.Sources {
		t := s.Totals
		self := ""
		if s.SelfContained {
			self = ", self-contained"
		}
		fmt.Fprintf(w, "source %s: %s, %s (%s), %s -> %s%s\n",
			s.Checkpoint, count(s.Shards, "shard"), count(t.Tensors, "tensor"), payloadKinds(t), human(t.RawBytes), human(t.StoredBytes), self)
	}
	t := res.Totals
	if o.Tensors {
		var tc columns
		tc.add("tensor", "dtype", "values", "stored", "bits/value", "bound", "coverage", "escapes", "exp-entropy", "why raw")
		for _, r := range res.Tensors {
			cov, esc := fmt.Sprintf("%.5f", r.Coverage), fmt.Sprintf("%.2e", r.EscapeRate)
			if !r.CodebookMeasured() {
				cov, esc = "-", "-" // every exponent coded, or never measured
			}
			ent := "-" // never measured
			if r.ExponentEntropy != nil {
				ent = fmt.Sprintf("%.3f", *r.ExponentEntropy)
			}
			tc.add(cell(r.Name), r.DType, strconv.FormatUint(r.Values, 10), storedName(r.Stored),
				fmt.Sprintf("%.3f", r.BitsPerValue), bound(r.BoundBits), cov, esc, ent, r.Reason)
		}
		if err := tc.write(w); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "dtype\ttensors\tfixed\tentropy\traw size\tstored size\tbits/value\tentropy bound")
	for _, d := range res.DTypes {
		bits := "-" // no values
		if d.RawBytes > 0 {
			bits = fmt.Sprintf("%.3f", d.BitsPerValue)
		}
		b := bound(d.BoundBits)
		if d.BoundShare > 0 {
			b += fmt.Sprintf(" (of %.1f%% of values)", 100*d.BoundShare)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", d.DType, d.Tensors, d.Fixed, d.Entropy, human(d.RawBytes), human(d.StoredBytes), bits, b)
	}
	tw.Flush()
	var ent, inPlace int
	for _, d := range res.DTypes {
		ent, inPlace = ent+d.Entropy, inPlace+d.EntropyInPlace
	}
	if ent > 0 {
		fmt.Fprintf(w, "entropy payloads: %d of %d decodable in place (a GPU decodes those where they land; the others on the host)\n", inPlace, ent)
	}
	// A load is of one checkpoint: a prediction each.
	for _, sr := range res.Sources {
		if p := sr.Predicted; p != nil && p.Stored > 0 {
			of := ""
			if len(res.Sources) > 1 {
				of = " of " + sr.Checkpoint
			}
			fmt.Fprintf(w, "predicted load%s from the page cache, warm process (cost model of %s): %.2f ms as stored, %.2f ms all raw (raw ÷ stored %.3fx)\n",
				of, p.Host, p.Stored*1e3, p.Raw*1e3, p.Raw/p.Stored)
		}
	}
	bf16 := "" // the dtype table gives every dtype's bits in its own width
	if t.BF16RawBytes > 0 {
		bf16 = fmt.Sprintf("; BF16 %s -> %s (%.3f bits/value of 16)", human(t.BF16RawBytes), human(t.BF16StoredBytes), 16*ratio(t.BF16StoredBytes, t.BF16RawBytes))
	}
	fmt.Fprintf(w, "total: %s (%s), %s -> %s (%.1f%% saved)%s; cache holds %s, %s in %s\n",
		count(t.Tensors, "tensor"), payloadKinds(t), human(t.RawBytes), human(t.StoredBytes), 100*(1-ratio(t.StoredBytes, t.RawBytes)),
		bf16, count(res.Objects, "object"), human(res.ObjectBytes), count(res.Files, "file"))
	if res.SharedTensors > 0 {
		// The sums above add each tensor on its own (trial 69c).
		fmt.Fprintf(w, "shared: %s stored in the cache once for several tensors with the same bytes (%s), counted again in the sums above\n",
			human(res.SharedBytes), count(res.SharedTensors, "tensor"))
	}
	if res.StrayFiles > 0 {
		fmt.Fprintf(w, "and %s (%s) that no checkpoint uses: killed runs leave them (or a writer running now has not committed them yet); splitzip gc %s removes them\n",
			count(res.StrayFiles, "file"), human(res.StrayBytes), dir)
	}
	if res.BF16BoundBits > 0 {
		fmt.Fprintf(w, "BF16 exponent-entropy bound: %.3f bits/value (what an ideal coder of each tensor's exponents would store)\n", res.BF16BoundBits)
	}
	if o.Bits {
		printEntropyBits(w, res.DTypes)
	}
	if p := res.Packs; p.Packs > 0 {
		verb := "hold"
		if p.Packs == 1 {
			verb = "holds"
		}
		fmt.Fprintf(w, "packs: %s, %s in all, %s %s", count(p.Packs, "pack"), human(p.PackBytes), verb, count(p.Members, "small object"))
		if p.DeadBytes > 0 {
			fmt.Fprintf(w, "; %s in them belong to no object (gc frees them)", human(p.DeadBytes))
		}
		fmt.Fprintln(w)
	}
	return nil
}

// printEntropyBits prints, per dtype, where the bits of its entropy
// payloads go, in bits a value, beside their entropy bound: the gap is
// the kept bits above the format's, the code words (and raw and constant
// chunks) above the coded field's entropy, and the rest.
func printEntropyBits(w io.Writer, dtypes []pipeline.DTypeReport) {
	if !slices.ContainsFunc(dtypes, func(d pipeline.DTypeReport) bool { return d.EntropyBits != nil && d.EntropyBits.Values > 0 }) {
		fmt.Fprintln(w, "where entropy payloads' bits go: the cache holds no entropy payloads")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "where entropy payloads' bits go, in bits a value:")
	fmt.Fprintln(tw, "dtype\tpayloads (pairs)\tvalues\tstored\tkept\tcodes\traw/constant\tlane tables\tchunk index\theads\tpadding\tbound\tgap\tcodes above entropy\t")
	for _, d := range dtypes {
		e := d.EntropyBits
		if e == nil || e.Values == 0 {
			continue
		}
		v := float64(e.Values)
		per := func(bits uint64) string { return fmt.Sprintf("%.4f", float64(bits)/v) }
		excess := float64(e.Codes+e.Plain)/v - (e.BoundBits - e.OtherBits)
		fmt.Fprintf(tw, "%s\t%d (%d)\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.4f\t%.4f\t%.4f\t\n", d.DType, e.Payloads, e.PairPayloads, e.Values, per(e.Bits), per(e.Kept), per(e.Codes),
			per(e.Plain), per(e.Lanes), per(e.Index), per(e.Head), per(e.Padding), e.BoundBits, float64(e.Bits)/v-e.BoundBits, excess)
	}
	tw.Flush()
}

// payloadKinds says how many tensors are payloads of each codec and how
// many are stored raw (kept so by the cost model, or for any other reason:
// a dtype the codec does not take, a payload that would not save enough),
// so that the counts add up to the tensors.
func payloadKinds(t pipeline.Totals) string {
	s := fmt.Sprintf("%d fixed", t.CompressedTensors-t.EntropyTensors)
	if t.EntropyTensors > 0 {
		s += fmt.Sprintf(", %d entropy", t.EntropyTensors)
	}
	if t.CostRawTensors > 0 {
		s += fmt.Sprintf(", %d kept raw by the cost model (%s)", t.CostRawTensors, human(t.CostRawBytes))
	}
	if raw := t.Tensors - t.CompressedTensors - t.CostRawTensors; raw > 0 {
		s += fmt.Sprintf(", %d raw", raw)
	}
	return s
}

// storedName is how the table names a tensor's stored form: the fixed
// codec's on-disk name ("splitzip", kept in the index and in --json) as
// the codec is called everywhere else.
func storedName(s string) string {
	if s == shardcache.StoredFixed {
		return pipeline.CodecFixed
	}
	return s
}

// bound prints an entropy bound in bits a value, or "-" for none known.
func bound(bits float64) string {
	if bits == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", bits)
}

// cell is a name as a table cell: quoted (Go syntax) where it holds
// characters that would break the table's rows or columns (a newline, a
// tab, other control characters), is empty, begins or ends with a space
// or holds a quote, else as it is.
func cell(name string) string {
	if name == "" || strings.TrimSpace(name) != name || strings.ContainsRune(name, '"') {
		return strconv.Quote(name) // blank, or with spaces at an end
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return strconv.Quote(name)
		}
	}
	return name
}
