package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/qwenref/qwenref/model"
)

// A mixed backend takes one backend's kernels and swaps some for
// another's: "chunked:delta=naive:conv=naive" is the chunked backend with
// the naive gated delta rule and conv. It measures what transformers'
// fallback does (fast GEMMs, unfused GDN core and conv) rather than what
// losing every fast kernel costs. Parts: matmul, conv, delta, attn.
var mixParts = []string{"matmul", "conv", "delta", "attn"}

// parseMix splits a backend spec into its base and part overrides,
// checking every name against the registry.
func parseMix(spec string, registered []string) (base string, over map[string]string, err error) {
	fields := strings.Split(spec, ":")
	base = fields[0]
	if !slices.Contains(registered, base) {
		return "", nil, fmt.Errorf("unknown backend %q (registered: %s)", base, strings.Join(registered, ", "))
	}
	over = map[string]string{}
	for _, f := range fields[1:] {
		part, from, ok := strings.Cut(f, "=")
		switch {
		case !ok || !slices.Contains(mixParts, part):
			return "", nil, fmt.Errorf("backend %q: %q is not PART=BACKEND with PART one of %s", spec, f, strings.Join(mixParts, ", "))
		case !slices.Contains(registered, from):
			return "", nil, fmt.Errorf("backend %q: unknown backend %q (registered: %s)", spec, from, strings.Join(registered, ", "))
		case over[part] != "":
			return "", nil, fmt.Errorf("backend %q: %s given twice", spec, part)
		}
		over[part] = from
	}
	return base, over, nil
}

// mixBackend builds a spec's backend from plain ones got by get (which
// owns and closes them); the mix itself holds nothing to release.
func mixBackend(spec string, get func(string) (*model.Backend, error)) (*model.Backend, error) {
	base, over, err := parseMix(spec, model.BackendNames())
	if err != nil {
		return nil, err
	}
	b, err := get(base)
	if err != nil {
		return nil, err
	}
	mix := &model.Backend{Name: spec, MatMul: b.MatMul, Conv: b.Conv, Delta: b.Delta, Attn: b.Attn}
	for part, from := range over {
		o, err := get(from)
		if err != nil {
			return nil, err
		}
		switch part {
		case "matmul":
			mix.MatMul = o.MatMul
		case "conv":
			mix.Conv = o.Conv
		case "delta":
			mix.Delta = o.Delta
		case "attn":
			mix.Attn = o.Attn
		}
	}
	return mix, nil
}
