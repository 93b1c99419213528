package model

import (
	"fmt"
	"strings"

	"github.com/qwenref/qwenref/tensor"
)

// A Mixer is a decoder block's token mixer: the one part of a block that
// differs by layer kind. Each kind is one file (mixer_gdn.go,
// mixer_attention.go) that registers a mixerKind; the block, the plan,
// the stage lists, the loader, sessions and memory estimates ask the
// mixer instead of branching on the kind, so a third kind is that file,
// its layer package and its plan ops.
type Mixer interface {
	// Kind is the layer_types value the mixer is built for.
	Kind() LayerKind
	// Stages lists what the mixer records over t tokens, in recording
	// order, with paths from its normed input, and its output's path.
	Stages(t int) ([]tensor.Stage, tensor.StagePath)
	// NewState is the empty cache of one sequence (position 0).
	NewState() MixerState
	// Matrices lists the mixer's weight matrices.
	Matrices() []*tensor.Matrix
	// step runs one of the kind's plan ops on the CPU: in is the normed
	// rows, out the mixer's product (written by its last op). segs, when
	// more than one, are the start rows of packed samples: each starts
	// from an empty state and sees only its own rows, and st is left with
	// the last one's.
	step(op PlanOp, w *mixerWork, in, out []float32, t int, segs []int, st MixerState, be *Backend, rec tensor.Recorder) error
}

// MixerState is one sequence's cache for one mixer.
type MixerState interface {
	// Reset empties the cache for a new sequence.
	Reset()
	// save copies what cannot be rewound (Session.Snapshot).
	save() mixerSave
}

// mixerSave is a mixer state kept by a Snapshot.
type mixerSave interface {
	restore(MixerState)
	bytes() int64
}

// mixerWork is what a mixer hands from one of its ops to the next.
type mixerWork struct{ w interface{ Release() } }

func (w *mixerWork) release() {
	if w.w != nil {
		w.w.Release()
	}
}

// mixerKind is one registered kind of token mixer.
type mixerKind struct {
	kind  LayerKind
	name  string // its layer_types value
	title string // its name for people ("Gated DeltaNet")
	// ops are its plan ops with how many of its stages each records; the
	// last writes the mixer's output (the residual add).
	ops []planOp
	// build returns the layer of cfg's dims, weights unbound; with a nil
	// cfg, a blank layer (for stage names).
	build func(cfg *Config) Mixer
	// params counts one layer's parameters; bufs are the widths (floats
	// per token) of the buffers one layer's forward lends from
	// internal/bufpool, all live until the layer ends; state is one sequence's fixed-size state in
	// floats (EstimateMemory's States) and cache what it keeps per token
	// (its Caches).
	params func(cfg *Config) int64
	bufs   func(cfg *Config) []int64
	state  func(cfg *Config) int64
	cache  func(cfg *Config) int64
}

// owns reports whether o is one of the kind's plan ops.
func (k *mixerKind) owns(o PlanOp) bool {
	for _, p := range k.ops {
		if p.op == o {
			return true
		}
	}
	return false
}

// mixerKinds are the registered kinds, by LayerKind.
var mixerKinds []*mixerKind

// registerMixer adds a kind; each mixer file calls it from init.
func registerMixer(k *mixerKind) {
	for int(k.kind) >= len(mixerKinds) {
		mixerKinds = append(mixerKinds, nil)
	}
	if mixerKinds[k.kind] != nil {
		panic(fmt.Sprintf("model: mixer kind %d registered twice", k.kind))
	}
	mixerKinds[k.kind] = k
}

// mixerOf returns the registered kind k, or nil.
func mixerOf(k LayerKind) *mixerKind {
	if k < 0 || int(k) >= len(mixerKinds) {
		return nil
	}
	return mixerKinds[k]
}

// mixerNamed returns the kind whose layer_types value is name, or nil.
func mixerNamed(name string) *mixerKind {
	for _, k := range mixerKinds {
		if k != nil && k.name == name {
			return k
		}
	}
	return nil
}

// mixerNames lists the layer_types values qwenref reads, for errors.
func mixerNames() string {
	var all []string
	for _, k := range mixerKinds {
		if k != nil {
			all = append(all, k.name)
		}
	}
	return strings.Join(all, " or ")
}

// NewMixer returns the token mixer of kind k with cfg's dims and unbound
// weights.
func NewMixer(cfg *Config, k LayerKind) (Mixer, error) {
	mk := mixerOf(k)
	if mk == nil {
		return nil, fmt.Errorf("no token mixer of kind %d", int(k))
	}
	return mk.build(cfg), nil
}

// DescribeLayers says how many layers of each mixer the config has, e.g.
// "3 Gated DeltaNet, 1 attention".
func (c *Config) DescribeLayers() string {
	var parts []string
	for _, k := range mixerKinds {
		if k == nil {
			continue
		}
		n := 0
		for _, l := range c.LayerTypes {
			if l == k.kind {
				n++
			}
		}
		parts = append(parts, fmt.Sprintf("%d %s", n, k.title))
	}
	return strings.Join(parts, ", ")
}
