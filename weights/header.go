package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/nlpodyssey/safetensors"
)

// maxHeaderSize is the largest JSON header accepted, the same 100 MB limit
// the reference (Rust) safetensors implementation enforces.
const maxHeaderSize = 100_000_000

// MaxTensors caps the tensors of one file and the entries of one index: a
// 27B checkpoint has about 1,200, the largest published ones under 100k.
// A header at the 100 MB limit can list millions of one-byte tensors,
// whose bookkeeping alone would take gigabytes.
const MaxTensors = 1 << 17

// MaxRank caps the dims of one tensor's shape: numpy 2 allows 64
// (NPY_MAXDIMS) and a model's tensors have at most a handful, while a
// 100 MB header could list one shape of fifty million dims, gigabytes
// once decoded and held.
const MaxRank = 64

// metadataKey is the reserved header key holding free-form string metadata.
const metadataKey = "__metadata__"

// extraDTypeSizes lists dtypes the reference format knows but the
// nlpodyssey/safetensors library does not, so their byte counts can still be
// checked at open. They stay unreadable (an error when requested).
var extraDTypeSizes = map[string]uint64{
	"F8_E4M3": 1,
	"F8_E5M2": 1,
	"F8_E8M0": 1,
	"C64":     8,
}

// dtypeSize returns the element size of a dtype string, or false when the
// dtype is unknown (then only its offsets can be checked).
func dtypeSize(s string) (uint64, bool) {
	if dt, err := safetensors.ParseDType(s); err == nil {
		return dt.Size(), true
	}
	n, ok := extraDTypeSizes[s]
	return n, ok
}

// rawTensor is one tensor entry of a parsed header.
type rawTensor struct {
	name       string // as stored in the file
	dtype      string // as stored, possibly unknown
	shape      []int
	begin, end int // byte offsets relative to the start of the data section
}

// header is a validated safetensors header over a file's bytes.
type header struct {
	dataStart int // 8 + header length: where the data section begins
	tensors   []rawTensor
	metadata  map[string]string
}

// parseHeader validates a whole safetensors file held in buf (normally the
// mmap) and returns its tensors. Every check the format allows is made here,
// once, so reads afterwards need no bounds checks beyond slicing. file only
// labels errors.
func parseHeader(file string, buf []byte) (*header, error) {
	p := &problems{file: file}
	size := uint64(len(buf))
	if size < 8 {
		p.addf("file is %d bytes, too short for the 8-byte header length field", size)
		return nil, p.err()
	}
	n := binary.LittleEndian.Uint64(buf[:8])
	if n > size-8 {
		p.addf("header length field says %d bytes but only %d bytes follow it (truncated file or not a safetensors file)", n, size-8)
		return nil, p.err()
	}
	if n > maxHeaderSize {
		p.addf("header of %d bytes exceeds the %d-byte limit", n, maxHeaderSize)
		return nil, p.err()
	}
	hdr := buf[8 : 8+n]
	if !utf8.Valid(hdr) {
		p.addf("header is not valid UTF-8")
		return nil, p.err()
	}
	entries, err := decodeObject(hdr, MaxTensors+2) // + __metadata__, + one to tell "over"
	if errors.Is(err, errTooMany) || tensorCount(entries) > MaxTensors {
		p.addf("header lists more than %d tensors, the limit (see docs/limits.md)", MaxTensors)
		return nil, p.err()
	}
	if err != nil {
		p.addf("header is not valid JSON: %v", err)
		return nil, p.err()
	}
	h := &header{dataStart: int(8 + n)}
	dataLen := size - 8 - n
	for _, kv := range entries {
		if kv.dup {
			p.tensorf(kv.key, "listed more than once in the header")
			continue
		}
		if kv.key == metadataKey {
			if err := decodeStrict(kv.raw, &h.metadata); err != nil {
				p.addf("%s is not an object of strings: %v", metadataKey, err)
			}
			continue
		}
		t, ok := parseEntry(p, kv.key, kv.raw, dataLen)
		if ok {
			h.tensors = append(h.tensors, t)
		}
	}
	if p.any() {
		// A broken entry leaves a hole in the layout; reporting the hole too
		// would only repeat the real problem.
		return nil, p.err()
	}
	checkLayout(p, h.tensors, int(dataLen))
	if err := p.err(); err != nil {
		return nil, err
	}
	return h, nil
}

// parseEntry decodes and checks one tensor entry: dtype, shape, offsets in
// range, and (for known dtypes) byte count = element size × prod(shape).
func parseEntry(p *problems, name string, raw json.RawMessage, dataLen uint64) (rawTensor, bool) {
	members, err := decodeObject(raw, 16)
	if err != nil {
		p.tensorf(name, "entry is not a JSON object")
		return rawTensor{}, false
	}
	fields := make(map[string]json.RawMessage, len(members))
	bad := false
	for _, kv := range members {
		if kv.dup {
			p.tensorf(name, "field %s appears more than once in its entry", quote(kv.key))
			bad = true
		}
		fields[kv.key] = kv.raw
	}
	t := rawTensor{name: name}
	if err := decodeString(fields["dtype"], &t.dtype); err != nil {
		p.tensorf(name, `"dtype" is missing or not a string`)
		bad = true
	}
	shape, err := decodeNaturals(fields["shape"], MaxRank)
	switch {
	case errors.Is(err, errTooMany):
		p.tensorf(name, `"shape" has more than %d dims, the limit (see docs/limits.md)`, MaxRank)
		bad = true
	case err != nil:
		p.tensorf(name, `"shape" is missing or not an array of natural numbers`)
		bad = true
	}
	offs, err := decodeNaturals(fields["data_offsets"], 2)
	if err != nil || len(offs) != 2 {
		p.tensorf(name, `"data_offsets" is missing or not a pair of natural numbers`)
		bad = true
	}
	if bad {
		return rawTensor{}, false
	}
	// Offsets are checked even for an unknown dtype: a reader must never
	// slice outside the file, whatever the tensor's type.
	if offs[0] > offs[1] || offs[1] > dataLen {
		p.tensorf(name, "data_offsets [%d, %d] out of range for a data section of %d bytes", offs[0], offs[1], dataLen)
		return rawTensor{}, false
	}
	t.begin, t.end = int(offs[0]), int(offs[1])
	elems := uint64(1)
	t.shape = make([]int, len(shape))
	for i, d := range shape {
		var ok bool
		if elems, ok = mulChecked(elems, d); !ok || d > math.MaxInt {
			p.tensorf(name, "shape %v overflows", shape)
			return rawTensor{}, false
		}
		t.shape[i] = int(d)
	}
	if size, known := dtypeSize(t.dtype); known {
		want, ok := mulChecked(elems, size)
		if !ok || want != offs[1]-offs[0] {
			p.tensorf(name, "data_offsets [%d, %d] hold %d bytes but dtype %s × shape %v needs %d",
				offs[0], offs[1], offs[1]-offs[0], t.dtype, shape, want)
			return rawTensor{}, false
		}
	}
	return t, true
}

// checkLayout requires the tensors to tile the data section exactly, as the
// reference implementation does: sorted by offset, each starts where the
// previous ended (no overlap, no gap) and the last ends at end of file.
func checkLayout(p *problems, ts []rawTensor, dataLen int) {
	sorted := make([]*rawTensor, len(ts))
	for i := range ts {
		sorted[i] = &ts[i]
	}
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.begin != b.begin {
			return a.begin < b.begin
		}
		if a.end != b.end {
			return a.end < b.end
		}
		return a.name < b.name
	})
	pos := 0
	var prev *rawTensor
	for _, t := range sorted {
		switch {
		case t.begin < pos:
			p.tensorf(t.name, "data_offsets [%d, %d] overlap tensor %s at [%d, %d]", t.begin, t.end, quote(prev.name), prev.begin, prev.end)
		case t.begin > pos:
			p.tensorf(t.name, "data_offsets [%d, %d] leave a gap of %d unused bytes before it", t.begin, t.end, t.begin-pos)
		}
		if t.end > pos {
			pos, prev = t.end, t
		}
	}
	if pos < dataLen {
		p.addf("%d bytes of trailing data after the last tensor", dataLen-pos)
	}
}

// mulChecked multiplies natural numbers, reporting overflow of uint64.
func mulChecked(a, b uint64) (uint64, bool) {
	if a != 0 && b > math.MaxUint64/a {
		return 0, false
	}
	return a * b, true
}

// tensorCount is how many header members are not __metadata__.
func tensorCount(kvs []keyValue) int {
	n := len(kvs)
	for _, kv := range kvs {
		if kv.key == metadataKey {
			n--
		}
	}
	return n
}

// errTooMany reports a JSON object with more members than allowed.
var errTooMany = errors.New("too many members")

// keyValue is one member of a JSON object, in document order.
type keyValue struct {
	key string
	raw json.RawMessage
	dup bool // the key appeared earlier in the same object
}

// decodeObject splits a JSON object into its members without losing
// duplicate keys, which encoding/json would silently collapse (last wins):
// a duplicated tensor name must be an error, not a hidden tensor.
//
// More than limit members is errTooMany, found before they are all held.
func decodeObject(data []byte, limit int) ([]keyValue, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	seen := make(map[string]bool)
	var out []keyValue
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("object key is %v, not a string", tok)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("value of %q: %w", key, err)
		}
		if len(out) == limit {
			return nil, errTooMany
		}
		out = append(out, keyValue{key: key, raw: raw, dup: seen[key]})
		seen[key] = true
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return out, nil
}

// decodeStrict unmarshals raw into v, treating a missing value as an error.
// JSON null is accepted and leaves v at its zero value.
func decodeStrict(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return errors.New("missing")
	}
	return json.Unmarshal(raw, v)
}

// decodeString unmarshals a JSON string, rejecting null and a missing value.
func decodeString(raw json.RawMessage, v *string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return errors.New("not a string")
	}
	return json.Unmarshal(raw, v)
}

// decodeNaturals decodes a JSON array of natural numbers, rejecting null
// and a missing value. More than limit elements is errTooMany, found
// before they are all held.
func decodeNaturals(raw json.RawMessage, limit int) ([]uint64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, errors.New("not an array")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // the opening bracket
		return nil, err
	}
	var out []uint64
	for dec.More() {
		if len(out) == limit {
			return nil, errTooMany
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("%v is not a number", tok)
		}
		// As json.Unmarshal into a uint64: digits only, no sign, fraction
		// or exponent.
		v, err := strconv.ParseUint(num.String(), 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, err
	}
	return out, nil
}
