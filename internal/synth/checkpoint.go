package synth

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/splitzip/splitzip/atomicfile"
	"github.com/splitzip/splitzip/safetensors"
)

// Config describes a synthetic checkpoint.
type Config struct {
	Bytes  uint64 // approximate total size, in bytes of the dtype (DType)
	Shards int    // number of shard files; 1 writes model.safetensors
	Hidden uint64 // hidden size; 0 picks one from Bytes (4096 gives Llama-7B's 90 MB MLP tensors)
	Seed   uint64
	// Small, when positive, makes the checkpoint that many small BF16
	// tensors of 1 to 64 KiB (the norms and biases case) instead of a
	// Llama-like one; Bytes is then ignored.
	Small int
	// Tiny, when positive, makes it that many tiny BF16 tensors of 32
	// bytes to 4 KiB (the many-tensor case: what each tensor costs a load
	// beside its bytes); Bytes is then ignored.
	Tiny int
	// Mix, when positive, makes it that many BF16 tensors with the size
	// mix of real models (60% under 16 KiB, the rest up to 4 MiB).
	Mix int
	// MoE, when positive, makes it a mixture of experts with that many
	// experts per layer, Layers layers (default 48) and hidden size Hidden
	// (default 2048).
	MoE    int
	Layers int
	// DType, for the Llama-like checkpoint, is the dtype of its weights
	// and norms: BF16 (""), or F16, F32, F8_E4M3 or F8_E5M2, cast from the
	// BF16 values (Cast; FP8 scaled per row).
	DType string
	// Progress, if set, is called with the bytes written so far.
	Progress func(written uint64)
}

// Tensor is one planned tensor.
type Tensor struct {
	safetensors.TensorSpec
	kind  string  // "weight", "norm", "f32", "i64"
	sigma float64 // for weights
	cols  uint64
}

// Plan returns a Llama-like tensor list of about cfg.Bytes bytes: hidden
// size and layer count grow with the size, the vocabulary is odd so the
// embedding has an odd length, plus one F32 and one I64 tensor.
func Plan(cfg Config) []Tensor {
	switch {
	case cfg.Small > 0:
		return planSmall(cfg)
	case cfg.Tiny > 0:
		return planTiny(cfg)
	case cfg.Mix > 0:
		return planMix(cfg)
	case cfg.MoE > 0:
		return planMoE(cfg)
	}
	// The shape is planned in BF16 bytes: a Bytes of another dtype is
	// that many BF16 bytes scaled by the dtype's width.
	budget := cfg.Bytes
	if es := dtypeSize[cfg.DType]; es > 0 {
		budget = cfg.Bytes / es * 2
	}
	layerBytes := func(h uint64) uint64 {
		kv, inter := h/4, h*43/16
		return 2 * (2*h*h + 2*kv*h + 3*inter*h + 2*h)
	}
	h := uint64(64)
	for _, c := range []uint64{4096, 2048, 1024, 512, 256, 128} {
		if layerBytes(c)*12 <= budget {
			h = c
			break
		}
	}
	if cfg.Hidden > 0 {
		h = cfg.Hidden
	}
	vocab := uint64(32003)
	if 4*vocab*h > budget/4 {
		vocab = max(67, budget/(16*h)) | 1
	}
	layers := uint64(1)
	if fixed := 4*vocab*h + 2*h; budget > fixed+layerBytes(h) {
		layers = (budget - fixed) / layerBytes(h)
	}
	kv, inter := h/4, h*43/16
	var ts []Tensor
	add := func(name, kind string, sigma float64, shape ...uint64) {
		dt, es := "BF16", uint64(2)
		switch kind {
		case "f32":
			dt, es = "F32", 4
		case "i64":
			dt, es = "I64", 8
		default:
			if cfg.DType != "" {
				dt, es = cfg.DType, dtypeSize[cfg.DType]
			}
		}
		n := uint64(1)
		for _, d := range shape {
			n *= d
		}
		ts = append(ts, Tensor{TensorSpec: safetensors.TensorSpec{Name: name, DType: dt, Shape: shape, Size: n * es},
			kind: kind, sigma: sigma, cols: shape[len(shape)-1]})
	}
	resid := 0.02 / math.Sqrt(2*float64(layers))
	add("model.embed_tokens.weight", "weight", 0.02, vocab, h)
	add("model.rotary_emb.inv_freq", "f32", 0, h/32)
	add("model.position_ids", "i64", 0, 1, 2048)
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", "norm", 0, h)
		add(p+"self_attn.q_proj.weight", "weight", 0.02, h, h)
		add(p+"self_attn.k_proj.weight", "weight", 0.02, kv, h)
		add(p+"self_attn.v_proj.weight", "weight", 0.02, kv, h)
		add(p+"self_attn.o_proj.weight", "weight", resid, h, h)
		add(p+"post_attention_layernorm.weight", "norm", 0, h)
		add(p+"mlp.gate_proj.weight", "weight", 0.02, inter, h)
		add(p+"mlp.up_proj.weight", "weight", 0.02, inter, h)
		add(p+"mlp.down_proj.weight", "weight", resid, h, inter)
	}
	add("model.norm.weight", "norm", 0, h)
	add("lm_head.weight", "weight", 0.02, vocab, h)
	return ts
}

// pieceBytes is the unit of parallel generation; each piece has its own
// random stream, so the output does not depend on the number of workers.
const pieceBytes = 4 << 20

// dtypeSize is the bytes a value of each float dtype Config.DType names.
var dtypeSize = map[string]uint64{"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "F8_E5M2": 1}

// DTypes are the dtypes Config.DType may name.
func DTypes() []string { return []string{"BF16", "F16", "F32", "F8_E4M3", "F8_E5M2"} }

// fill generates bytes [off, off+len(dst)) of tensor t (off and len
// multiples of pieceBytes, except at the end).
func (t *Tensor) fill(dst []byte, seed, index, off uint64) {
	rng := rand.New(rand.NewPCG(seed^index*0x9e3779b97f4a7c15, off))
	if es := dtypeSize[t.DType]; t.DType != "BF16" && es > 0 && (t.kind == "weight" || t.kind == "norm") {
		// BF16 values of this piece, cast.
		b := make([]byte, 2*uint64(len(dst))/es)
		t.fillBF16(b, rng, off)
		copy(dst, Cast(b, t.DType, int(t.cols)))
		return
	}
	t.fillBF16(dst, rng, off)
}

// fillBF16 generates bytes [off, off+len(dst)) of t as BF16 for weights
// and norms, in t's own dtype for the others.
func (t *Tensor) fillBF16(dst []byte, rng *rand.Rand, off uint64) {
	switch t.kind {
	case "weight":
		FillNormal(rng, dst, t.sigma, 0.5, int(t.cols))
	case "norm":
		for i := 0; i+1 < len(dst); i += 2 {
			binary.LittleEndian.PutUint16(dst[i:], BF16(float32(1+0.05*rng.NormFloat64())))
		}
	case "f32":
		for i := 0; i+3 < len(dst); i += 4 {
			k := (off + uint64(i)) / 4
			binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(float32(math.Pow(10000, -float64(2*k)/float64(2*t.cols)))))
		}
	case "i64":
		for i := 0; i+7 < len(dst); i += 8 {
			binary.LittleEndian.PutUint64(dst[i:], (off+uint64(i))/8)
		}
	}
}

// Write generates the checkpoint into dir, which must not exist or be
// empty, and returns the paths it wrote. The files are written under
// temporary names (atomicfile) and renamed into place once all are
// written; a Write that fails or is cancelled removes what it wrote.
func Write(ctx context.Context, dir string, cfg Config) ([]string, error) {
	if cfg.Shards < 1 {
		return nil, fmt.Errorf("synth: need at least one shard, got %d", cfg.Shards)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ts := Plan(cfg)
	var total uint64
	for _, t := range ts {
		total += t.Size
	}
	// Split in order into shards of about equal size.
	groups := make([][]int, cfg.Shards)
	var acc uint64
	for i, t := range ts {
		s := min(cfg.Shards-1, int(acc*uint64(cfg.Shards)/max(total, 1)))
		groups[s] = append(groups[s], i)
		acc += t.Size
	}
	// Fewer tensors than shards, or a large one spanning several shares,
	// leave groups empty: the files are named for those written.
	groups = slices.DeleteFunc(groups, func(g []int) bool { return len(g) == 0 })
	// Every file is written under a temporary name and renamed into
	// place once all are written: a failed or interrupted run leaves no
	// file a reader would take for a checkpoint, and removes its own.
	var paths, temps []string
	done := false
	defer func() {
		if !done {
			for _, t := range temps {
				os.Remove(t)
			}
		}
	}()
	weightMap := map[string]string{}
	var written uint64
	for s, g := range groups {
		name := "model.safetensors"
		if cfg.Shards > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, len(groups))
		}
		specs := make([]safetensors.TensorSpec, len(g))
		for k, i := range g {
			specs[k] = ts[i].TensorSpec
			weightMap[ts[i].Name] = name
		}
		head, _, err := safetensors.EncodeHeader(map[string]string{"format": "pt"}, specs)
		if err != nil {
			return nil, err
		}
		f, err := atomicfile.CreateTemp(dir, name)
		if err != nil {
			return nil, err
		}
		temps, paths = append(temps, f.Name()), append(paths, filepath.Join(dir, name))
		if err := writeShard(ctx, f, head, ts, g, cfg, &written); err != nil {
			return nil, err
		}
	}
	if cfg.Shards > 1 {
		ix, _ := json.MarshalIndent(map[string]any{
			"metadata":   map[string]any{"total_size": total},
			"weight_map": weightMap,
		}, "", "  ")
		f, err := atomicfile.CreateTemp(dir, safetensors.IndexFileName)
		if err != nil {
			return nil, err
		}
		temps, paths = append(temps, f.Name()), append(paths, filepath.Join(dir, safetensors.IndexFileName))
		_, err = f.Write(append(ix, '\n'))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	for k, t := range temps {
		if err := os.Rename(t, paths[k]); err != nil {
			for _, p := range paths[:k] {
				os.Remove(p)
			}
			return nil, err
		}
	}
	done = true
	return paths, nil
}

// writeShard writes a shard's header and tensors g to f, and closes it.
func writeShard(ctx context.Context, f *os.File, head []byte, ts []Tensor, g []int, cfg Config, written *uint64) error {
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := w.Write(head); err != nil {
		return err
	}
	// Pieces of consecutive tensors are generated together, so that a
	// checkpoint of many tensors smaller than a piece uses every core.
	workers := runtime.GOMAXPROCS(0)
	const batch = 16 // pieces generated at once
	buf := make([]byte, batch*pieceBytes)
	type part struct {
		i      int    // tensor
		off, n uint64 // bytes of the tensor
		at     uint64 // where in buf
	}
	var parts []part
	used := uint64(0)
	flush := func() error {
		var wg sync.WaitGroup
		sem := make(chan struct{}, workers)
		for _, p := range parts {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				ts[p.i].fill(buf[p.at:p.at+p.n], cfg.Seed, uint64(p.i), p.off)
			})
		}
		wg.Wait()
		if _, err := w.Write(buf[:used]); err != nil {
			return err
		}
		*written += used
		if cfg.Progress != nil {
			cfg.Progress(*written)
		}
		parts, used = parts[:0], 0
		return ctx.Err()
	}
	for _, i := range g {
		t := &ts[i]
		for off := uint64(0); off < t.Size; off += pieceBytes {
			n := min(pieceBytes, t.Size-off)
			if used+n > uint64(len(buf)) {
				if err := flush(); err != nil {
					return err
				}
			}
			parts = append(parts, part{i, off, n, used})
			used += n
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}
