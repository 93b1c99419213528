package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/model"
)

// ParseOps parses a comma-separated op list. "layers" stands for every op
// but model, "all" for every op. Duplicates are dropped; order is kept.
func ParseOps(s string) ([]*Op, error) {
	var out []*Op
	add := func(o *Op) {
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch f {
		case "":
			continue
		case "all", "layers":
			for _, o := range ops {
				if f == "all" || !o.wholeModel {
					add(o)
				}
			}
		default:
			o, ok := LookupOp(f)
			if !ok {
				return nil, fmt.Errorf("unknown op %q (known: %s; or layers, all)", f, strings.Join(OpNames(), ", "))
			}
			add(o)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty op list (known: %s; or layers, all)", strings.Join(OpNames(), ", "))
	}
	return out, nil
}

// MaxSeq bounds a sequence length: beyond it the activations alone of a
// 27B layer outgrow any machine this runs on.
const MaxSeq = 1 << 20

// ParseSeqs parses a comma-separated list of sequence lengths, e.g.
// "512,2048,8192". A k suffix multiplies by 1024 ("32k" = 32768).
// Duplicates are dropped; the result is sorted.
func ParseSeqs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mul := 1
		if n := strings.TrimSuffix(strings.ToLower(f), "k"); n != strings.ToLower(f) {
			f, mul = n, 1024
		}
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 || v > MaxSeq/mul {
			return nil, fmt.Errorf("%q is not a sequence length (a whole number from 1 to %d)", f, MaxSeq)
		}
		if !slices.Contains(out, v*mul) {
			out = append(out, v*mul)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list of sequence lengths")
	}
	slices.Sort(out)
	return out, nil
}

// ParseBackends parses a comma-separated backend list against the
// registered names; an empty string means every registered backend. An
// entry may be a mix, BASE:PART=OTHER[:PART=OTHER...] with PART one of
// matmul, conv, delta, attn: e.g. "chunked:delta=naive:conv=naive" is
// chunked with the naive GDN core and conv.
func ParseBackends(s string, registered []string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		if len(registered) == 0 {
			return nil, fmt.Errorf("no backends are registered")
		}
		return slices.Clone(registered), nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if _, err := model.ParseSpec(f); err != nil {
			return nil, err
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty backend list (registered: %s)", strings.Join(registered, ", "))
	}
	return out, nil
}

// MaxBatch bounds the batch rows of ops model and decode (the device
// model's limit).
const MaxBatch = 1024

// ParseBatches parses a comma-separated list of batch row counts, e.g.
// "1,8,32".
func ParseBatches(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 || v > MaxBatch {
			return nil, fmt.Errorf("%q is not a batch size (a whole number from 1 to %d)", f, MaxBatch)
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}
