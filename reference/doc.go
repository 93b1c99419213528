// Package reference holds float64 versions of the three core operations of
// the Qwen3.5/3.6 hybrid model, written as the plainest possible loops:
//
//   - GatedDeltaRule: the gated delta rule recurrence of a Gated DeltaNet
//     layer, one position at a time (Yang, Kautz, Hatamizadeh 2024, "Gated
//     Delta Networks: Improving Mamba2 with Delta Rule");
//   - CausalConvSiLU: the causal depthwise convolution with SiLU that feeds it;
//   - Attention: causal softmax attention with grouped KV heads (GQA,
//     Ainslie et al. 2023), as the gated attention layers run it.
//
// Each function takes exactly the layouts of the matching float32 Kernel
// interface (gateddelta.Kernel, conv1d.Kernel, attention.Kernel), with
// []float64 in place of []float32, so a kernel's inputs can be widened and
// fed here unchanged. Computing in float64 puts the rounding error about
// nine orders of magnitude below float32's, so the result is, for every
// practical purpose, the exact answer a float32 kernel approximates. It is
// what `qwenref golden` stores as the expected output of a test vector.
//
// On top of them, GDNMixer, AttentionMixer and DecoderLayer are whole
// layers in float64 (layers.go), checked against transformers' goldens;
// BuildVector and BuildLayerVector write `qwenref golden` files with
// inputs rounded to f32, bf16 or f16 (dtype.go) and the bars a correct
// kernel meets (tolerance.go).
//
// The backward passes (gdngrad.go, gradops.go: GatedDeltaRuleBackward and
// its L2 form, CausalConvSiLUBackward, GatedRMSNormBackward,
// GatedAttentionBackward) give every input's gradient in float64, checked
// by finite differences; BuildGradVector writes `qwenref golden --grad`
// files from them (docs/learn/06-gradients.md).
//
// Nothing here is fast, and nothing should be: these functions are the
// yardstick, not a backend.
package reference
