package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/qwenref/qwenref/model"
)

// helpTopics are `qwenref help TOPIC` pages that are not commands.
var helpTopics = map[string]func(io.Writer){
	"backends": helpBackends,
}

// helpBackends lists every backend and kernel variant this build has, in
// the one grammar every command's --backend / --backends accepts.
func helpBackends(w io.Writer) {
	fmt.Fprintf(w, `Backends: how each op of the model is computed (never what).

Every command that takes --backend or --backends (run, forward, generate,
trace, bench, perplexity, check) accepts the same grammar:

  BASE[:PART=NAME]...

BASE is one of the backends below. Each PART=NAME swaps one op's kernel:
PART is matmul, conv, delta (the gated delta rule core), attn (the
attention core) or moe (the routed experts of mixture-of-experts layers),
and NAME is a kernel variant of that part or another backend, whose
kernel for that part is taken. Examples:

  chunked                          the default: fast CPU kernels, fp32 throughout
  chunked:delta=naive:conv=naive   what transformers does without fla and causal-conv1d
  chunked:delta=recurrent          the per-token (decode) kernel over every position
  chunked:delta=chunked16          WY/UT chunks of 16 tokens instead of 64
  chunked:matmul=bf16              bf16 compute for the projections (AMX or AVX512_BF16; = chunked-bf16)

Backends in this build:
`)
	for _, n := range model.BackendNames() {
		fmt.Fprintf(w, "  %-10s %s\n", n, model.BackendHelp(n))
	}
	fmt.Fprintf(w, "\nKernel variants (PART=NAME; a backend's name also works as NAME):\n")
	for _, part := range model.Parts {
		for _, n := range model.PartChoices(part) {
			if h := model.KernelHelp(part, n); h != "" && !isBackend(n) {
				fmt.Fprintf(w, "  %-6s = %-11s %s\n", part, n, h)
			}
		}
	}
	k := model.CPUKernels()
	fmt.Fprintf(w, `
A device-resident backend (cuda) takes no part swaps: they would copy
activations off the device. The cuda backends are in every build (prebuilt
kernels, no CUDA toolkit needed); they start where an NVIDIA driver (580+)
and cuBLAS 13 are found, and --gpu N picks the GPU.

CPU kernel level: %s (set %s=%s to force a lower one).
bf16 compute (matmul=bf16, chunked-bf16): %s
(set %s=amx|avx512bf16|widen to force one).
`, k.Name, k.EnvVar, strings.Join(k.Levels, "|"), k.BF16, k.BF16EnvVar)
}

func isBackend(n string) bool {
	for _, b := range model.BackendNames() {
		if b == n {
			return true
		}
	}
	return false
}
