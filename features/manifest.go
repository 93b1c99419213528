package features

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
)

// ManifestFile is the manifest's name in an output directory.
const ManifestFile = "manifest.json"

// Formats of an output directory.
const (
	FormatShards      = "qwenref"     // shard-NNNNN.safetensors: features [T, layers, H], input_ids, loss_mask, offsets
	FormatSpeculators = "speculators" // hidden_states/hs_N.safetensors, one per sample
)

// Convention says what a layer index means, written into every manifest.
const Convention = "layer i is the output of decoder layer i counted from 0 (the residual stream before the final norm): transformers' output_hidden_states[i+1] (for i < L-1; output_hidden_states[L] is post-norm), vLLM's and SGLang's layer boundary i+1; final is layer L-1's output (pre-norm), final_norm is the final norm's output (post-norm, transformers' last_hidden_state)"

// Manifest describes an output directory; it is rewritten after every
// shard, so an interrupted run resumes where it stopped.
type Manifest struct {
	Format     string            `json:"format"`
	Model      string            `json:"model"`
	ModelFiles map[string]string `json:"model_files_sha256"`
	Data       string            `json:"data"`
	DataSHA256 string            `json:"data_sha256"`
	Layers     []Tap             `json:"layers"`
	Convention string            `json:"convention"`
	DType      string            `json:"dtype"`
	Hidden     int               `json:"hidden_size"`
	NumLayers  int               `json:"num_hidden_layers"`
	MaxLen     int               `json:"max_len"`
	Rank       int               `json:"rank"`
	WorldSize  int               `json:"world_size"`
	ShardBytes int64             `json:"shard_bytes"`
	Backend    string            `json:"backend"`
	Precision  string            `json:"backend_precision,omitempty"` // "bf16" or "f32"

	// Progress: NextIndex is the first sample (of the whole file) not yet
	// decided; samples before it are written or skipped.
	NextIndex      int       `json:"next_index"`
	SamplesDone    int       `json:"samples_done"`
	TokensDone     int64     `json:"tokens_done"`
	Truncated      int       `json:"truncated_samples"`
	TokensCut      int64     `json:"tokens_cut"`
	Skipped        []Skipped `json:"skipped"`
	Shards         []Shard   `json:"shards"`
	Complete       bool      `json:"complete"`
	SamplesPlanned int       `json:"samples_planned"`
}

// Skipped is a bad line left out under --on-error skip.
type Skipped struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// Shard is one written file.
type Shard struct {
	File    string `json:"file"`
	SHA256  string `json:"sha256"`
	Samples int    `json:"samples"`
	Tokens  int    `json:"tokens"`
	Bytes   int64  `json:"bytes"`
}

// settings is the part of a manifest a resumed run must agree with.
func (m *Manifest) settings() string {
	c := *m
	c.NextIndex, c.SamplesDone, c.TokensDone, c.Truncated, c.TokensCut = 0, 0, 0, 0, 0
	c.Skipped, c.Shards, c.Complete, c.SamplesPlanned = nil, nil, false, 0
	b, _ := json.Marshal(c)
	return string(b)
}

// differs names the first setting in which a and b disagree.
func differs(a, b *Manifest) string {
	var x, y map[string]any
	_ = json.Unmarshal([]byte(a.settings()), &x)
	_ = json.Unmarshal([]byte(b.settings()), &y)
	keys := make([]string, 0, len(x))
	for k := range x {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		xa, _ := json.Marshal(x[k])
		ya, _ := json.Marshal(y[k])
		if !bytes.Equal(xa, ya) {
			return k
		}
	}
	return ""
}

// ReadManifest reads DIR/manifest.json; it returns nil, nil when absent.
func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestFile)
	data, err := safeio.ReadCapped(path, 256<<20, "manifest")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: not a features manifest: %v", safeio.Clean(path), err)
	}
	if m.Format != FormatShards && m.Format != FormatSpeculators {
		return nil, fmt.Errorf("%s: unknown format %q", safeio.Clean(path), m.Format)
	}
	return &m, nil
}

// write replaces DIR/manifest.json atomically.
func (m *Manifest) write(dir string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	return safeio.WriteFile(filepath.Join(dir, ManifestFile), func(w io.Writer) error { _, err := w.Write(b); return err }, safeio.WriteOptions{})
}

// FileSHA256 hashes a file.
func FileSHA256(path string) (string, error) {
	f, _, err := safeio.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", safeio.Clean(path), err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// modelFiles hashes the files of a checkpoint directory that decide its
// outputs: config, weights and index, tokenizer and chat template.
func modelFiles(dir string) (map[string]string, error) {
	if dir == "" {
		return map[string]string{}, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !(strings.HasSuffix(n, ".safetensors") || strings.HasSuffix(n, ".json") || strings.HasSuffix(n, ".jinja")) {
			continue
		}
		if out[n], err = FileSHA256(filepath.Join(dir, n)); err != nil {
			return nil, err
		}
	}
	return out, nil
}
