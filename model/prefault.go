package model

import "github.com/qwenref/qwenref/tensor"

// Matrices lists every weight matrix once (a tied head is not repeated).
func (m *Model) Matrices() []*tensor.Matrix {
	var out []*tensor.Matrix
	add := func(ms ...*tensor.Matrix) {
		for _, x := range ms {
			if x != nil && (len(out) == 0 || out[len(out)-1] != x) {
				out = append(out, x)
			}
		}
	}
	add(m.Embed)
	if m.LMHead != m.Embed {
		add(m.LMHead)
	}
	for i := range m.Blocks {
		add(m.Blocks[i].matrices()...)
	}
	return out
}

// matrices lists one block's weight matrices.
func (b *Block) matrices() []*tensor.Matrix {
	out := b.moeMatrices()
	if b.MLP != nil {
		out = append(out, b.MLP.Gate, b.MLP.Up, b.MLP.Down)
	}
	if b.Mixer != nil {
		out = append(out, b.Mixer.Matrices()...)
	}
	return out
}

// SetStreaming makes every forward pass drop each layer's memory-mapped
// pages once the layer is done, so a checkpoint larger than RAM runs with
// a resident set of about one layer plus the embedding and head. It has no
// effect on models not loaded from a checkpoint.
func (m *Model) SetStreaming(on bool) { m.streaming = on }

// dropBlock releases one block's mapped pages when streaming.
func (m *Model) dropBlock(i int) {
	if !m.streaming || m.store == nil {
		return
	}
	for _, x := range m.Blocks[i].matrices() {
		_ = m.store.DropPages(x) // advisory: a failure only costs memory
	}
}

// WeightBytes is the storage size of all weight matrices.
func (m *Model) WeightBytes() int64 {
	var n int64
	for _, x := range m.Matrices() {
		n += x.Bytes()
	}
	return n
}

// Prefault reads one value per 4 KiB page of every weight matrix so that a
// memory-mapped checkpoint is paged in up front, calling progress as it
// goes. Only worth it when the weights fit in RAM; otherwise the OS pages
// layers in and out during the forward pass. A checkpoint file truncated
// since Load is an error naming the file (instead of a fatal SIGBUS).
func (m *Model) Prefault(progress func(done, total int64)) error {
	total, done := m.WeightBytes(), int64(0)
	var sink uint32
	const page = 4096
	err := m.Guard(func() error {
		for _, x := range m.Matrices() {
			if x.BF16 != nil {
				for i := 0; i < len(x.BF16); i += page / 2 {
					sink += uint32(x.BF16[i])
				}
			} else {
				for i := 0; i < len(x.F32); i += page / 4 {
					sink += uint32(x.F32[i])
				}
			}
			done += x.Bytes()
			if progress != nil {
				progress(done, total)
			}
		}
		return nil
	})
	prefaultSink = sink
	return err
}

// prefaultSink keeps the page reads from being optimised away.
var prefaultSink uint32
