package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"sync"
	"unicode/utf8"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/tensor"
)

// writeChunk is how many values are converted per write: it bounds the
// writer's own memory (≤ 512 KiB, for I64) whatever the tensor size.
const writeChunk = 64 << 10

// TensorHeader declares one tensor of a file a StreamWriter will write.
type TensorHeader struct {
	Name  string // stored name, written as is
	DType string // "F32", "BF16", "F16", or "I64" (integral values, such as token ids)
	Shape []int
}

// NamedTensor is a whole tensor for WriteFile. Data holds prod(Shape)
// values; for DType "BF16" and "F16" they are rounded to nearest even on writing.
type NamedTensor struct {
	Name  string
	DType string
	Shape []int
	Data  []float32
}

// StreamWriter writes one safetensors file tensor by tensor, so a file far
// larger than memory (a 27B shard) can be produced from a generator. All
// tensors are declared up front, which fixes the header and every offset;
// data may then arrive in any order and in pieces (Append). Nothing appears
// at the destination until Close succeeds: the data goes to a temporary
// file in the same directory that Close renames into place. Its methods are
// safe for concurrent use.
type StreamWriter struct {
	mu    sync.Mutex
	path  string
	tmp   *safeio.Temp
	slots map[string]*slot
	order []string
	buf   []byte
	err   error // sticky I/O error: the temporary file is unusable
	done  bool
}

// slot tracks the unwritten remainder of one declared tensor.
type slot struct {
	dtype string
	off   int64 // file offset of the next value
	total int   // values declared
	left  int   // values still to come
}

// NewStreamWriter validates the declared tensors, lays them out as the
// reference implementation does (by descending element size, then by name,
// so every tensor is aligned to its element size; the header is padded with
// spaces to 8 bytes) and writes the header to a temporary file beside path.
// metadata goes to __metadata__; "format": "pt" is added when absent because
// transformers refuses safetensors files whose format it does not know.
//
// The target must be absent or a regular file that is none of opts' Inputs
// (at most one WriteOptions is used); see internal/safeio.
func NewStreamWriter(path string, tensors []TensorHeader, metadata map[string]string, opts ...WriteOptions) (*StreamWriter, error) {
	hs := append([]TensorHeader(nil), tensors...)
	if err := checkHeaders(path, hs, metadata); err != nil {
		return nil, err
	}
	sort.SliceStable(hs, func(i, j int) bool {
		si, sj := elemSize(hs[i].DType), elemSize(hs[j].DType)
		return si > sj || si == sj && hs[i].Name < hs[j].Name
	})
	meta := map[string]string{"format": "pt"}
	for k, v := range metadata {
		meta[k] = v
	}

	w := &StreamWriter{path: path, slots: make(map[string]*slot, len(hs))}
	var js bytes.Buffer
	js.WriteString(`{"` + metadataKey + `":`)
	js.Write(marshalJSON(meta))
	var off int64
	for _, h := range hs {
		n := 1
		for _, d := range h.Shape {
			n *= d
		}
		size := int64(n) * int64(elemSize(h.DType))
		shape := h.Shape
		if shape == nil {
			shape = []int{} // a scalar: JSON [] rather than null
		}
		js.WriteString(",")
		js.Write(marshalJSON(h.Name))
		fmt.Fprintf(&js, `:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, h.DType, marshalJSON(shape), off, off+size)
		w.slots[h.Name] = &slot{dtype: h.DType, off: off, total: n, left: n}
		w.order = append(w.order, h.Name)
		off += size
	}
	js.WriteString("}")
	for js.Len()%8 != 0 {
		js.WriteByte(' ')
	}
	dataStart := int64(8 + js.Len())
	for _, s := range w.slots {
		s.off += dataStart
	}

	tmp, err := safeio.CreateTemp(path, firstOpts(opts))
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	w.tmp = tmp
	head := binary.LittleEndian.AppendUint64(nil, uint64(js.Len()))
	head = append(head, js.Bytes()...)
	// Truncate first so the data may be written in any order.
	if err := tmp.Truncate(dataStart + off); err != nil {
		w.discard()
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	if _, err := tmp.WriteAt(head, 0); err != nil {
		w.discard()
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	return w, nil
}

// checkHeaders rejects anything that would make an invalid or ambiguous file.
func checkHeaders(path string, hs []TensorHeader, metadata map[string]string) error {
	p := &problems{file: path}
	seen := make(map[string]bool, len(hs))
	for _, h := range hs {
		switch {
		case h.Name == "" || h.Name == metadataKey || !utf8.ValidString(h.Name):
			p.tensorf(h.Name, "invalid tensor name")
		case seen[h.Name]:
			p.tensorf(h.Name, "declared twice")
		case elemSize(h.DType) == 0:
			p.tensorf(h.Name, "dtype %q is not writable (want F32, BF16, F16 or I64)", h.DType)
		}
		seen[h.Name] = true
		n := int64(1)
		for _, d := range h.Shape {
			if d < 0 || d > 0 && n > math.MaxInt64/8/int64(d) {
				p.tensorf(h.Name, "bad shape %v", h.Shape)
				break
			}
			n *= int64(d)
		}
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			p.addf("metadata %q is not valid UTF-8", k)
		}
	}
	return p.err()
}

// elemSize is the size of a writable dtype, or 0.
func elemSize(dtype string) int {
	switch dtype {
	case "I64":
		return 8
	case "F32":
		return 4
	case "BF16", "F16":
		return 2
	}
	return 0
}

// marshalJSON encodes v without HTML escaping; v is always encodable.
func marshalJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// Order returns the tensor names in file order. Writing in this order gives
// sequential I/O, though any order is accepted.
func (w *StreamWriter) Order() []string { return append([]string(nil), w.order...) }

// Append writes the next len(data) values of the named tensor, so a huge
// tensor can be produced a few rows at a time. A tensor is complete once it
// has received all prod(shape) values; more is an error.
func (w *StreamWriter) Append(name string, data []float32) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, err := w.slot(name)
	if err != nil {
		return err
	}
	if len(data) > s.left {
		return fmt.Errorf("weights: %s: tensor %q: %d more values given but only %d of %d remain", w.path, name, len(data), s.left, s.total)
	}
	return w.write(name, s, data)
}

// WriteTensor writes a whole tensor at once: data must hold exactly
// prod(shape) values and nothing may have been appended to it before.
func (w *StreamWriter) WriteTensor(name string, data []float32) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, err := w.slot(name)
	if err != nil {
		return err
	}
	if s.left != s.total || len(data) != s.total {
		return fmt.Errorf("weights: %s: tensor %q: got %d values, want exactly %d (already written: %d)", w.path, name, len(data), s.total, s.total-s.left)
	}
	return w.write(name, s, data)
}

// slot finds a declared tensor, refusing once the writer is finished or
// broken. The caller holds w.mu.
func (w *StreamWriter) slot(name string) (*slot, error) {
	switch {
	case w.done:
		return nil, fmt.Errorf("weights: %s: writer already closed", w.path)
	case w.err != nil:
		return nil, w.err
	}
	s, ok := w.slots[name]
	if !ok {
		return nil, fmt.Errorf("weights: %s: tensor %q was not declared", w.path, name)
	}
	return s, nil
}

// write converts and stores data chunk by chunk at the slot's offset.
func (w *StreamWriter) write(name string, s *slot, data []float32) error {
	size := elemSize(s.dtype)
	if w.buf == nil {
		w.buf = make([]byte, writeChunk*4)
	}
	for len(data) > 0 {
		n := min(len(data), writeChunk)
		if w.buf == nil || len(w.buf) < n*size {
			w.buf = make([]byte, writeChunk*8)
		}
		b := w.buf[:n*size]
		if s.dtype == "I64" {
			for i, v := range data[:n] {
				if v != float32(math.Trunc(float64(v))) || math.Abs(float64(v)) > 1<<24 {
					w.err = fmt.Errorf("weights: %s: tensor %q: value %g is not an integer below 2^24, as I64 tensors must be", w.path, name, v)
					return w.err
				}
				binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
			}
		} else if size == 4 {
			for i, v := range data[:n] {
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
			}
		} else {
			to16 := tensor.Float32ToBF16
			if s.dtype == "F16" {
				to16 = tensor.Float32ToF16
			}
			for i, v := range data[:n] {
				binary.LittleEndian.PutUint16(b[2*i:], to16(v))
			}
		}
		if _, err := w.tmp.WriteAt(b, s.off); err != nil {
			w.err = fmt.Errorf("weights: %s: tensor %q: %w", w.path, name, err)
			return w.err
		}
		s.off += int64(len(b))
		s.left -= n
		data = data[n:]
	}
	return nil
}

// Close checks that every declared tensor is complete, flushes the
// temporary file to disk and renames it to the destination. On any failure
// the temporary file is removed and the destination is left untouched.
func (w *StreamWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return fmt.Errorf("weights: %s: writer already closed", w.path)
	}
	if w.err != nil {
		w.discard()
		return w.err
	}
	p := &problems{file: w.path}
	for _, name := range w.order {
		if s := w.slots[name]; s.left > 0 {
			p.tensorf(name, "only %d of %d values written", s.total-s.left, s.total)
		}
	}
	if err := p.err(); err != nil {
		w.discard()
		return err
	}
	if err := w.tmp.Commit(); err != nil {
		w.done = true
		return fmt.Errorf("weights: %w", err)
	}
	w.done = true
	return nil
}

// Abort discards everything written; the destination is left untouched.
// It is a no-op after Close or a previous Abort.
func (w *StreamWriter) Abort() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil
	}
	return w.discard()
}

// discard closes and removes the temporary file. The caller holds w.mu.
func (w *StreamWriter) discard() error {
	w.done = true
	if err := w.tmp.Discard(); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	return nil
}

// WriteFile writes tensors to a safetensors file at path, atomically: on
// any error nothing is left at path (an existing file there is untouched).
// opts (at most one) name the inputs the file must not replace.
func WriteFile(path string, tensors []NamedTensor, metadata map[string]string, opts ...WriteOptions) error {
	hs := make([]TensorHeader, len(tensors))
	byName := make(map[string]*NamedTensor, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		hs[i] = TensorHeader{Name: t.Name, DType: t.DType, Shape: t.Shape}
		byName[t.Name] = t
	}
	w, err := NewStreamWriter(path, hs, metadata, opts...)
	if err != nil {
		return err
	}
	for _, name := range w.Order() {
		if err := w.WriteTensor(name, byName[name].Data); err != nil {
			_ = w.Abort()
			return err
		}
	}
	return w.Close()
}

// WriteIndex writes dir/model.safetensors.index.json for a sharded
// checkpoint, atomically. weightMap maps stored tensor names to shard file
// names in dir; totalSize is the sum of the tensors' byte sizes, as
// transformers records it.
func WriteIndex(dir string, weightMap map[string]string, totalSize int64, opts ...WriteOptions) error {
	path := filepath.Join(dir, IndexFile)
	p := &problems{file: path}
	if len(weightMap) == 0 {
		p.addf("weight map is empty")
	}
	if totalSize < 0 {
		p.addf("negative total size %d", totalSize)
	}
	for name, shard := range weightMap {
		if name == "" || !utf8.ValidString(name) {
			p.tensorf(name, "invalid tensor name")
		}
		if !validShardName(shard) {
			p.tensorf(name, "shard %q is not a plain file name", shard)
		}
	}
	if err := p.err(); err != nil {
		return err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	idx := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": totalSize}, weightMap}
	if err := enc.Encode(idx); err != nil {
		return fmt.Errorf("weights: %s: %w", path, err)
	}
	if err := safeio.WriteFile(path, func(w io.Writer) error { _, err := w.Write(b.Bytes()); return err }, firstOpts(opts)); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	return nil
}

// WriteOptions say which files an output must not replace (the command's
// inputs) and the mode of a new file; see internal/safeio.
type WriteOptions = safeio.WriteOptions

func firstOpts(opts []WriteOptions) WriteOptions {
	if len(opts) > 0 {
		return opts[0]
	}
	return WriteOptions{}
}

// ShardName returns the conventional name of shard i (1-based) of n, e.g.
// "model-00001-of-00011.safetensors".
func ShardName(i, n int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n)
}
