package model

import (
	"fmt"

	"github.com/qwenref/qwenref/layers/moe"
	"github.com/qwenref/qwenref/tensor"
)

// Stages lists, in recording order, what Block.Forward records for t
// tokens from a fresh state: "input", "mixer_in", the mixer's own stages,
// "mixer_out", "mlp_in", the MoE block's stages in a sparse layer,
// "mlp_out" and "output", each with its shape and its path from the
// block's input (the input RMSNorm reduces over H, the dense MLP over H
// then I), from which the trace comparison sets its bars.
func (b *Block) Stages(t int) []tensor.Stage {
	h := len(b.InputNorm)
	row := []int{t, h}
	mixerIn := tensor.StagePath{Reduction: h, Amp: 1}
	stages := []tensor.Stage{
		{Name: "input", Shape: row, Path: tensor.StagePath{Amp: 1}},
		{Name: "mixer_in", Shape: row, Path: mixerIn},
	}
	add := func(from tensor.StagePath, inner []tensor.Stage) {
		for _, s := range inner {
			s.Path = from.Then(s.Path)
			stages = append(stages, s)
		}
	}
	inner, mixer := b.Mixer.Stages(t)
	add(mixerIn, inner)
	mixerOut := mixerIn.Then(mixer)
	mlpIn := mixerOut.Then(tensor.StagePath{Reduction: h, Amp: 1})
	stages = append(stages, tensor.Stage{Name: "mixer_out", Shape: row, Path: mixerOut}, tensor.Stage{Name: "mlp_in", Shape: row, Path: mlpIn})
	var mlp tensor.StagePath
	if b.MoE != nil {
		add(mlpIn, b.MoE.Dims.Stages(t))
		mlp = b.MoE.Dims.OutputPath()
	} else {
		inter := 0
		if b.MLP != nil && b.MLP.Gate != nil {
			inter = b.MLP.Gate.Rows
		}
		mlp = tensor.StagePath{Reduction: h + inter, Amp: 1, Products: 2} // gate and up, then down
	}
	mlpOut := mlpIn.Then(mlp)
	return append(stages, tensor.Stage{Name: "mlp_out", Shape: row, Path: mlpOut}, tensor.Stage{Name: "output", Shape: row, Path: mlpOut})
}

// Stages lists, in recording order, what a forward pass over t tokens
// records (Session.Forward with Options.Record, all logits): "embeddings",
// every block's stages under "layers.N.", "final_norm" and "logits". A
// block's paths start at the block's input; the head's at the stage
// before it (final_norm at the last block's output, logits at
// final_norm), as the trace comparison feeds them.
func (m *Model) Stages(t int) []tensor.Stage {
	h := m.Config.HiddenSize
	stages := []tensor.Stage{{Name: stageEmbeddings, Shape: []int{t, h}, Path: tensor.StagePath{Reduction: 1, Amp: 1}}}
	for li := range m.Blocks {
		prefix := fmt.Sprintf("layers.%d.", li)
		for _, s := range m.Blocks[li].Stages(t) {
			s.Name = prefix + s.Name
			stages = append(stages, s)
		}
	}
	return append(stages,
		tensor.Stage{Name: stageFinalNorm, Shape: []int{t, h}, Path: tensor.StagePath{Reduction: h, Amp: 1}},
		tensor.Stage{Name: stageLogits, Shape: []int{t, m.Config.VocabSize}, Path: tensor.StagePath{Reduction: h, Amp: 1, Products: 1}})
}

// StageNames lists the names of the stages a block records, in order, for
// a block of this mixer with a dense MLP or, sparse, an MoE block: the
// names do not depend on the model's widths.
func StageNames(kind LayerKind, sparse bool) []string {
	mk := mixerOf(kind)
	if mk == nil {
		return nil
	}
	b := &Block{Kind: kind, Mixer: mk.build(nil)}
	if sparse {
		b.MoE = &moe.Layer{}
	}
	var names []string
	for _, s := range b.Stages(0) {
		names = append(names, s.Name)
	}
	return names
}
