package synth

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/splitzip/splitzip/safetensors"
)

// Checkpoint shapes besides the Llama-like default: many small tensors
// (planSmall), many tiny ones (planTiny), the size mix of real models
// (planMix) and a mixture of experts (planMoE).

// bf16Tensor returns a BF16 weight tensor of rows by cols values.
func bf16Tensor(name, kind string, sigma float64, rows, cols uint64) Tensor {
	shape := []uint64{rows, cols}
	if kind == "norm" {
		shape = []uint64{rows * cols}
	}
	return Tensor{TensorSpec: safetensors.TensorSpec{Name: name, DType: "BF16", Shape: shape, Size: 2 * rows * cols},
		kind: kind, sigma: sigma, cols: cols}
}

// planSmall returns cfg.Small BF16 tensors of 512 to 32768 values (1 to
// 64 KiB), 100 to a layer; one in ten is a norm, the others weights.
func planSmall(cfg Config) []Tensor {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5a11))
	ts := make([]Tensor, cfg.Small)
	for i := range ts {
		n := 512 * uint64(1+rng.IntN(64))
		kind := "weight"
		if i%10 == 0 {
			kind = "norm"
		}
		ts[i] = bf16Tensor(fmt.Sprintf("model.layers.%d.t%d.weight", i/100, i%100), kind, 0.02, n/64, 64)
	}
	return ts
}

// planTiny returns cfg.Tiny BF16 tensors of 16 to 2048 values (32 bytes
// to 4 KiB, log-uniform, in whole rows of 16), 100 to a layer; one in
// three is a norm, the others weights.
func planTiny(cfg Config) []Tensor {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7179))
	ts := make([]Tensor, cfg.Tiny)
	for i := range ts {
		n := uint64(math.Exp(math.Log(16)+rng.Float64()*(math.Log(2048)-math.Log(16)))) &^ 15
		kind := "weight"
		if i%3 == 0 {
			kind = "norm"
		}
		ts[i] = bf16Tensor(fmt.Sprintf("model.layers.%d.t%d.weight", i/100, i%100), kind, 0.02, max(n, 16)/16, 16)
	}
	return ts
}

// MixSmallShare is the share of a Mix checkpoint's tensors under 16 KiB.
const MixSmallShare = 0.6

// planMix returns cfg.Mix BF16 tensors with the size mix of real models
// (convolutional, speech and small language models): 60% under 16 KiB
// (norms, biases, depthwise filters; 1 to 16 KiB, log-uniform) and the
// rest 16 KiB to 4 MiB, log-uniform; 40 to a layer, in random order
// within it.
func planMix(cfg Config) []Tensor {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x313c))
	logUniform := func(lo, hi float64) uint64 {
		return uint64(math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo))))
	}
	ts := make([]Tensor, cfg.Mix)
	for i := range ts {
		var n uint64 // values
		small := rng.Float64() < MixSmallShare
		if small {
			n = logUniform(512, 8192) // 1 KiB to 16 KiB
		} else {
			n = logUniform(8192, 2<<20) // 16 KiB to 4 MiB
		}
		n = max(64, n&^63)
		if small && 2*n >= 16<<10 {
			n = 8192 - 64
		}
		kind := "weight"
		if small && i%3 == 0 {
			kind = "norm"
		}
		ts[i] = bf16Tensor(fmt.Sprintf("model.layers.%d.t%d.weight", i/40, i%40), kind, 0.02, n/64, 64)
	}
	return ts
}

// Experts' intermediate sizes, cycled: with a hidden size of 2048 their
// matrices are 1.5 to 3 MiB.
var expertInter = []uint64{384, 448, 512, 576, 768}

// planMoE returns a mixture-of-experts checkpoint: cfg.Layers layers (48
// if 0) of attention (grouped-query, a quarter of the heads for keys and
// values), two norms, a router, and cfg.MoE experts of three matrices
// each, with hidden size cfg.Hidden (2048 if 0).
func planMoE(cfg Config) []Tensor {
	layers := uint64(cfg.Layers)
	if layers == 0 {
		layers = 48
	}
	h := cfg.Hidden
	if h == 0 {
		h = 2048
	}
	experts := uint64(cfg.MoE)
	vocab := uint64(32000)
	resid := 0.02 / math.Sqrt(2*float64(layers))
	ts := []Tensor{bf16Tensor("model.embed_tokens.weight", "weight", 0.02, vocab, h)}
	k := 0
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		ts = append(ts,
			bf16Tensor(p+"input_layernorm.weight", "norm", 0, 1, h),
			bf16Tensor(p+"self_attn.q_proj.weight", "weight", 0.02, h, h),
			bf16Tensor(p+"self_attn.k_proj.weight", "weight", 0.02, h/4, h),
			bf16Tensor(p+"self_attn.v_proj.weight", "weight", 0.02, h/4, h),
			bf16Tensor(p+"self_attn.o_proj.weight", "weight", resid, h, h),
			bf16Tensor(p+"post_attention_layernorm.weight", "norm", 0, 1, h),
			bf16Tensor(p+"mlp.gate.weight", "weight", 0.02, experts, h))
		for e := range experts {
			inter := expertInter[k%len(expertInter)] * h / 2048
			k++
			q := fmt.Sprintf("%smlp.experts.%d.", p, e)
			ts = append(ts,
				bf16Tensor(q+"gate_proj.weight", "weight", 0.02, inter, h),
				bf16Tensor(q+"up_proj.weight", "weight", 0.02, inter, h),
				bf16Tensor(q+"down_proj.weight", "weight", resid, h, inter))
		}
	}
	return append(ts,
		bf16Tensor("model.norm.weight", "norm", 0, 1, h),
		bf16Tensor("lm_head.weight", "weight", 0.02, vocab, h))
}
