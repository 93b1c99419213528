//go:build unix

package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tokenizer"
	"github.com/qwenref/qwenref/weights"
)

// TestMain lets a test run qwenref in a child process: the test binary
// re-executes itself with QWENREF_HOSTILE_CHILD=1 and qwenref's args after "--".
func TestMain(m *testing.M) {
	if os.Getenv("QWENREF_HOSTILE_CHILD") == "1" {
		for i, a := range os.Args {
			if a == "--" {
				var stderr io.Writer = os.Stderr
				if mark := os.Getenv("QWENREF_HOSTILE_RESET_HWM"); mark != "" {
					stderr = &hwmResetter{w: os.Stderr, mark: mark, status: os.Getenv("QWENREF_HOSTILE_RSS") + ".reset"}
				}
				code := Main(os.Args[i+1:], os.Stdout, stderr)
				// The child's own peak RSS: rusage's ru_maxrss would also count
				// the parent's, which Linux carries over through fork and exec.
				if p := os.Getenv("QWENREF_HOSTILE_RSS"); p != "" {
					if st, err := os.ReadFile("/proc/self/status"); err == nil {
						_ = os.WriteFile(p, st, 0o644)
					}
				}
				os.Exit(code)
			}
		}
		os.Exit(2)
	}
	os.Exit(m.Run())
}

type childRun struct {
	code           int
	stdout, stderr string
	took           time.Duration
	peakKB         int64 // the child's VmHWM
	maxRSSKB       int64 // rusage ru_maxrss: at least the parent's peak too
	resetRSSKB     int64 // the child's RSS when its VmHWM was reset (childOpts.resetAt), or −1
	fileKB         int64 // the child's file-backed RSS at its end, or its most after a reset (the mapped weights, the binary)
	resetFileKB    int64 // the same when its VmHWM was reset
}

// hwmResetter passes writes through to w and, at the first that contains
// mark, resets the process's VmHWM to its present RSS (Linux's clear_refs)
// and saves /proc/self/status at that moment to status: the peak after it
// is then what the run allocated from there on.
type hwmResetter struct {
	w            io.Writer
	mark, status string
	done         bool
}

func (h *hwmResetter) Write(p []byte) (int, error) {
	if !h.done && strings.Contains(string(p), h.mark) {
		h.done = true
		if st, err := os.ReadFile("/proc/self/status"); err == nil {
			_ = os.WriteFile(h.status, st, 0o644)
		}
		_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
		go h.sampleFile()
	}
	return h.w.Write(p)
}

// sampleFile keeps the largest file-backed RSS seen from the reset on in
// status+".file", every millisecond until the process exits: the mapped
// weights' pages that a run touches are not what it allocates, and they
// leave the RSS when the command closes the model, before its end.
func (h *hwmResetter) sampleFile() {
	var most int64
	for {
		if st, err := os.ReadFile("/proc/self/status"); err == nil {
			if v := statusField(string(st), "RssFile:"); v > most {
				most = v
				_ = os.WriteFile(h.status+".file", []byte(strconv.FormatInt(most, 10)), 0o644)
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// runChild runs qwenref args in a child process and reports its exit
// code, output, wall time and peak RSS.
func runChild(t *testing.T, args ...string) childRun {
	t.Helper()
	return runChildIn(t, "", args...)
}

// runChildIn is runChild with stdin as the child's standard input.
func runChildIn(t *testing.T, stdin string, args ...string) childRun {
	t.Helper()
	return runChildOpts(t, childOpts{stdin: stdin}, args...)
}

// childOpts are runChildOpts' settings: the child's standard input, and
// resetAt, a text whose first appearance on the child's stderr resets its
// VmHWM (hwmResetter); childRun.resetRSSKB is then its RSS at that moment.
type childOpts struct{ stdin, resetAt string }

func runChildOpts(t *testing.T, co childOpts, args ...string) childRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Stdin = strings.NewReader(co.stdin)
	rssFile := filepath.Join(t.TempDir(), "status")
	cmd.Env = append(os.Environ(), "QWENREF_HOSTILE_CHILD=1", "QWENREF_HOSTILE_RSS="+rssFile)
	if co.resetAt != "" {
		cmd.Env = append(cmd.Env, "QWENREF_HOSTILE_RESET_HWM="+co.resetAt)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	start := time.Now()
	err := cmd.Run()
	r := childRun{stdout: o.String(), stderr: e.String(), took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("qwenref %s did not finish in 60 s", strings.Join(args, " "))
	}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSSKB = ru.Maxrss
	}
	r.readStatus(rssFile)
	return r
}

// readStatus reads what the child saved of its /proc status at rssFile
// (its end) and beside it (its VmHWM reset, the file-backed RSS sampled
// after it); the peak stays maxRSSKB where nothing was saved.
func (r *childRun) readStatus(rssFile string) {
	r.peakKB = statusKB(rssFile, "VmHWM:", r.maxRSSKB)
	r.fileKB = statusKB(rssFile, "RssFile:", 0)
	if b, err := os.ReadFile(rssFile + ".reset.file"); err == nil {
		r.fileKB, _ = strconv.ParseInt(string(b), 10, 64)
	}
	r.resetRSSKB = statusKB(rssFile+".reset", "VmRSS:", -1)
	r.resetFileKB = statusKB(rssFile+".reset", "RssFile:", 0)
}

// statusKB reads a field of a saved /proc/PID/status, or returns def.
func statusKB(path, field string, def int64) int64 {
	st, err := os.ReadFile(path)
	if err != nil {
		return def
	}
	if v := statusField(string(st), field); v >= 0 {
		return v
	}
	return def
}

// statusField is a kB field of a /proc/PID/status text, or −1.
func statusField(st, field string) int64 {
	for _, l := range strings.Split(st, "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			n := int64(-1)
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &n)
			return n
		}
	}
	return -1
}

// tree lists every path under dir with its type and size, to prove a run
// left the file system as it was.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, _ := os.Lstat(p)
		lines = append(lines, fmt.Sprintf("%s %v %d", p, info.Mode(), info.Size()))
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// copyCheckpoint copies a committed golden checkpoint into dir.
func copyCheckpoint(t *testing.T, name, dir string) {
	t.Helper()
	src := filepath.Join("../../testdata/golden", name)
	es, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range es {
		if e.Name() == "expected.safetensors" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
	}
}

// editConfig rewrites dir/config.json through a map.
func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	edit(m)
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
}

func mkfifo(t *testing.T, p string) {
	t.Helper()
	_ = os.Remove(p)
	require.NoError(t, syscall.Mkfifo(p, 0o644))
}

// TestHostileInputs is the command-level catalogue: each hostile input
// must give a non-zero exit and a one-line error naming the file, tensor
// or argument, within seconds and under 1 GB of peak RSS, in a child
// process, and leave the directory as it was.
func TestHostileInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs about 30 child processes")
	}
	type hostile struct {
		name  string
		setup func(t *testing.T, dir string) []string // returns the args
		want  []string                                // in the error line
	}
	ck := func(t *testing.T, dir string) string {
		m := filepath.Join(dir, "m")
		require.NoError(t, os.Mkdir(m, 0o755))
		copyCheckpoint(t, "causal-f16-t130", m)
		return m
	}
	forward := func(m, dir string, extra ...string) []string {
		return append([]string{"forward", "--model", m, "--ids", "1,2,3", "--out", filepath.Join(dir, "out.safetensors")}, extra...)
	}
	cases := []hostile{
		{"a billion layers, no layer_types", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			editConfig(t, m, func(c map[string]any) { delete(c, "layer_types"); c["num_hidden_layers"] = 1000000000 })
			return forward(m, dir)
		}, []string{"config.json", "num_hidden_layers is 1000000000"}},
		{"65536 layers", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			editConfig(t, m, func(c map[string]any) {
				lt := make([]string, 65536)
				for i := range lt {
					lt[i] = "linear_attention"
				}
				c["layer_types"], c["num_hidden_layers"] = lt, 65536
			})
			return forward(m, dir)
		}, []string{"config.json", "num_hidden_layers is 65536"}},
		{"overflowing dimensions", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			editConfig(t, m, func(c map[string]any) { c["hidden_size"], c["vocab_size"] = 1<<24, 1<<24 })
			return forward(m, dir)
		}, []string{"config.json", "embed_tokens [vocab_size, hidden_size] has more than"}},
		{"absurd rope_theta", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			editConfig(t, m, func(c map[string]any) { c["rope_parameters"].(map[string]any)["rope_theta"] = 1e300 })
			return forward(m, dir)
		}, []string{"config.json", "rope_theta is 1e+300", "the config is wrong"}},
		{"max_position_embeddings 0", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			editConfig(t, m, func(c map[string]any) { c["max_position_embeddings"] = 0 })
			return forward(m, dir)
		}, []string{"config.json", "max_position_embeddings must be positive"}},
		{"eos outside the vocabulary in generation_config.json", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			require.NoError(t, os.WriteFile(filepath.Join(m, "generation_config.json"), []byte(`{"eos_token_id":[5,9999]}`), 0o644))
			return []string{"generate", "--model", m, "--ids", "1,2", "--max-new-tokens", "1"}
		}, []string{"generation_config.json", "eos_token_id 9999 is outside"}},
		{"FIFO as config.json", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			mkfifo(t, filepath.Join(m, "config.json"))
			return forward(m, dir)
		}, []string{"config.json", "FIFO"}},
		{"FIFO as generation_config.json", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			mkfifo(t, filepath.Join(m, "generation_config.json"))
			return forward(m, dir)
		}, []string{"generation_config.json", "FIFO"}},
		{"FIFO as the weights", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			mkfifo(t, filepath.Join(m, "model.safetensors"))
			return forward(m, dir)
		}, []string{"model.safetensors", "FIFO"}},
		{"run --top-probs -1", func(t *testing.T, dir string) []string {
			return []string{"run", "--prompt", "hi", "--top-probs", "-1"}
		}, []string{"--top-probs must be 0 to 100"}},
		{"a space in --ids", func(t *testing.T, dir string) []string {
			return []string{"generate", "--ids", " 5", "--max-new-tokens", "1"}
		}, []string{"--ids", `" 5"`, "no spaces"}},
		{"trace --tol Inf", func(t *testing.T, dir string) []string {
			return []string{"trace", "--ids", "1,2", "--compare", filepath.Join(dir, "ref.safetensors"), "--chained", "--tol", "Inf"}
		}, []string{"--tol must be a finite number"}},
		{"bench --max-memory 1e-12", func(t *testing.T, dir string) []string {
			return []string{"bench", "--op", "conv", "--seq", "8", "--max-memory", "1e-12"}
		}, []string{"max-memory", "under 1 KiB"}},
		{"FIFO as the golden file of check", func(t *testing.T, dir string) []string {
			p := filepath.Join(dir, "golden.safetensors")
			mkfifo(t, p)
			return []string{"check", p}
		}, []string{"golden.safetensors", "FIFO"}},
		{"FIFO as the index", func(t *testing.T, dir string) []string {
			m := filepath.Join(dir, "m")
			require.NoError(t, os.Mkdir(m, 0o755))
			copyCheckpoint(t, "hub-bf16-sharded", m)
			mkfifo(t, filepath.Join(m, "model.safetensors.index.json"))
			return forward(m, dir)
		}, []string{"model.safetensors.index.json", "FIFO"}},
		{"FIFO as --tokenizer", func(t *testing.T, dir string) []string {
			p := filepath.Join(dir, "tok.json")
			mkfifo(t, p)
			return []string{"tokenize", "--tokenizer", p, "--text", "hi"}
		}, []string{"tok.json", "FIFO"}},
		{"FIFO as bench --config", func(t *testing.T, dir string) []string {
			p := filepath.Join(dir, "config.json")
			mkfifo(t, p)
			return []string{"bench", "--config", p, "--op", "gdn-core", "--seq", "8"}
		}, []string{"config.json", "FIFO"}},
		{"tokenizer gzip bomb", func(t *testing.T, dir string) []string {
			var gz bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
			chunk := make([]byte, 1<<20)
			for i := 0; i < 80; i++ {
				_, _ = zw.Write(chunk)
			}
			require.NoError(t, zw.Close())
			p := filepath.Join(dir, "tokenizer.json.gz")
			require.NoError(t, os.WriteFile(p, gz.Bytes(), 0o644))
			return []string{"tokenize", "--tokenizer", p, "--text", "hi"}
		}, []string{"tokenizer.json.gz", "inflated", "64 MiB"}},
		{"an index of 20,000 shards", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			var b strings.Builder
			b.WriteString(`{"weight_map":{`)
			for i := 0; i < 20000; i++ {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, `"t%d":"s%05d.safetensors"`, i, i)
			}
			b.WriteString("}}")
			require.NoError(t, os.WriteFile(filepath.Join(m, "model.safetensors.index.json"), []byte(b.String()), 0o644))
			return forward(m, dir)
		}, []string{"model.safetensors.index.json", "20000 shard files", "limit"}},
		{"a 97 MB header of 1.4 million tensors", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			var b bytes.Buffer
			b.WriteString("{")
			const n = 1_400_000
			for i := 0; i < n; i++ {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, `"t%07d":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}`, i, i, i+1)
			}
			b.WriteString("}")
			for b.Len()%8 != 0 {
				b.WriteByte(' ')
			}
			f, err := os.Create(filepath.Join(m, "model.safetensors"))
			require.NoError(t, err)
			var head [8]byte
			binary.LittleEndian.PutUint64(head[:], uint64(b.Len()))
			_, err = f.Write(head[:])
			require.NoError(t, err)
			_, err = f.Write(b.Bytes())
			require.NoError(t, err)
			require.NoError(t, f.Truncate(int64(8+b.Len()+n)))
			require.NoError(t, f.Close())
			return forward(m, dir)
		}, []string{"model.safetensors", "more than 131072 tensors"}},
		{"a small checkpoint whose recurrent state needs 256 GiB", func(t *testing.T, dir string) []string {
			m := filepath.Join(dir, "m")
			require.NoError(t, os.Mkdir(m, 0o755))
			js := `{"model_type":"qwen3_5_text","vocab_size":16,"hidden_size":1,"intermediate_size":1,
			"num_hidden_layers":1,"layer_types":["linear_attention"],"num_attention_heads":1,"num_key_value_heads":1,
			"head_dim":8,"linear_num_key_heads":1,"linear_num_value_heads":16,"linear_key_head_dim":65536,
			"linear_value_head_dim":65536,"tie_word_embeddings":true}`
			require.NoError(t, os.WriteFile(filepath.Join(m, "config.json"), []byte(js), 0o644))
			cfg, err := model.ParseConfig([]byte(js))
			require.NoError(t, err)
			var ts []weights.NamedTensor
			for _, e := range cfg.ExpectedTensors() {
				n := 1
				for _, d := range e.Shape {
					n *= d
				}
				ts = append(ts, weights.NamedTensor{Name: e.Name, DType: "BF16", Shape: e.Shape, Data: make([]float32, n)})
			}
			require.NoError(t, weights.WriteFile(filepath.Join(m, "model.safetensors"), ts, nil))
			return forward(m, dir)
		}, []string{"need about 256.", "states 256.02", "over the limit"}},
		{"ids as strings", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			p := filepath.Join(dir, "ids.json")
			require.NoError(t, os.WriteFile(p, []byte(`[[1,"2"]]`), 0o644))
			return []string{"forward", "--model", m, "--ids-json", p, "--out", filepath.Join(dir, "o.safetensors")}
		}, []string{"ids.json", `id 1 is "2"`}},
		{"--ids +5", func(t *testing.T, dir string) []string {
			return []string{"generate", "--model", ck(t, dir), "--ids", "+5"}
		}, []string{"--ids", `"+5"`}},
		{"ten million ids", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			p := filepath.Join(dir, "ids.json")
			require.NoError(t, os.WriteFile(p, []byte("[["+strings.TrimSuffix(strings.Repeat("1,", 10_000_000), ",")+"]]"), 0o644))
			return []string{"forward", "--model", m, "--ids-json", p, "--out", filepath.Join(dir, "o.safetensors")}
		}, []string{"--ids-json", "more than 4194304 token ids"}},
		{"longer than max_position_embeddings", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			return []string{"forward", "--model", m, "--ids", strings.TrimSuffix(strings.Repeat("1,", 5000), ","), "--out", filepath.Join(dir, "o.safetensors")}
		}, []string{"5000 positions exceed the model's max_position_embeddings of 4096"}},
		{"logits over --max-memory", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			return []string{"forward", "--model", m, "--ids", strings.TrimSuffix(strings.Repeat("1,", 4000), ","),
				"--out", filepath.Join(dir, "o.safetensors"), "--max-memory", "0.001"}
		}, []string{"GiB", "over the limit", "--max-memory 0.001"}},
		{"--max-memory NaN", func(t *testing.T, dir string) []string {
			return forward(ck(t, dir), dir, "--max-memory", "NaN")
		}, []string{"-max-memory", "want a positive number of GiB"}},
		{"bench --max-mem NaN", func(t *testing.T, dir string) []string {
			return []string{"bench", "--max-mem", "NaN", "--op", "gdn-core", "--seq", "8"}
		}, []string{"-max-mem", "want a positive number of GiB"}},
		{"golden --seq 1000000000", func(t *testing.T, dir string) []string {
			return []string{"golden", "--op", "gdn-core", "--seq", "1000000000", "--out", filepath.Join(dir, "g.safetensors")}
		}, []string{"--seq 1000000000: want 1 to 16777216"}},
		{"golden --seq 10000000 at 27b", func(t *testing.T, dir string) []string {
			return []string{"golden", "--op", "gdn-core", "--shape", "27b", "--seq", "10000000", "--out", filepath.Join(dir, "g.safetensors")}
		}, []string{"gdn-core", "T=10000000", "needs more than the limit"}},
		{"trace --values 1000000000", func(t *testing.T, dir string) []string {
			return []string{"trace", "--model", ck(t, dir), "--ids", "1,2", "--values", "1000000000"}
		}, []string{"--values must be 0 to 65536"}},
		{"synth --layers 1000000000", func(t *testing.T, dir string) []string {
			return []string{"synth", "--shape", "tiny", "--layers", "1000000000", "--out", filepath.Join(dir, "s")}
		}, []string{"--layers 1000000000", "at most 1024"}},
		{"--out is a device node", func(t *testing.T, dir string) []string {
			dev := filepath.Join(dir, "null")
			if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
				t.Skipf("mknod: %v", err)
			}
			m := ck(t, dir)
			return []string{"forward", "--model", m, "--ids", "1", "--out", dev}
		}, []string{"--out", "null", "character device"}},
		{"--out is a FIFO", func(t *testing.T, dir string) []string {
			p := filepath.Join(dir, "fifo")
			mkfifo(t, p)
			return []string{"golden", "--op", "conv", "--out", p}
		}, []string{"--out", "fifo", "FIFO"}},
		{"--out is the model's weights", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			return []string{"forward", "--model", m, "--ids", "1", "--out", filepath.Join(m, "model.safetensors")}
		}, []string{"--out", "model.safetensors", "refusing to overwrite an input"}},
		{"--out links to the model's weights", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			link := filepath.Join(dir, "link.safetensors")
			require.NoError(t, os.Symlink(filepath.Join(m, "model.safetensors"), link))
			return []string{"trace", "--model", m, "--ids", "1", "--out", link}
		}, []string{"--out", "link.safetensors", "refusing to overwrite an input"}},
		{"escape sequences in a tensor name", func(t *testing.T, dir string) []string {
			m := ck(t, dir)
			p := filepath.Join(m, "model.safetensors")
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			// Rename one tensor in the header in place (same length).
			old := []byte("model.norm.weight")
			require.True(t, bytes.Contains(b, old))
			b = bytes.Replace(b, old, []byte(`model.no\u001b[2J`), 1) // JSON for "model.no" ESC "[2J"
			require.NoError(t, os.WriteFile(p, b, 0o644))
			return forward(m, dir)
		}, []string{"norm.weight: missing"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := c.setup(t, dir)
			before := tree(t, dir)
			r := runChild(t, args...)
			line := strings.TrimSpace(r.stderr)
			assert.NotEqual(t, 0, r.code, "exit code 0; stderr: %s", line)
			assert.NotEqual(t, 3, r.code, "an internal error (panic): %s", line)
			assert.Less(t, r.took, 15*time.Second, "took %v", r.took)
			assert.Less(t, r.peakKB, int64(1<<20), "peak RSS %d MB", r.peakKB>>10)
			assert.NotContains(t, r.stderr, "\x1b", "a terminal escape reached the output")
			errLine := lastErrorLine(line)
			for _, w := range c.want {
				assert.Contains(t, errLine, w)
			}
			assert.Less(t, len(errLine), 1500, "error of %d bytes", len(errLine))
			assert.Equal(t, before, tree(t, dir), "the run changed the file system")
			t.Logf("exit %d in %v, peak RSS %d MB (rusage %d MB): %s", r.code, r.took.Round(time.Millisecond), r.peakKB>>10, r.maxRSSKB>>10, errLine)
		})
	}
}

// lastErrorLine is the "qwenref <cmd>: …" line of stderr, or the first
// line that names a flag error (usage text follows those).
func lastErrorLine(stderr string) string {
	lines := strings.Split(stderr, "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "qwenref ") || strings.HasPrefix(l, "invalid value") || strings.Contains(l, "must be") {
			return l
		}
	}
	return lines[0]
}

// The non-finite-logits error points to --check-weights; that flag must
// exist on run, forward and generate and name the bad tensor.
func TestCheckWeightsNamesTheTensor(t *testing.T) {
	dir := t.TempDir()
	copyCheckpoint(t, "causal-f16-t130", dir)
	p := filepath.Join(dir, "model.safetensors")
	st, err := model.OpenWeights(dir)
	require.NoError(t, err)
	var ts []weights.NamedTensor
	for _, n := range st.Names() {
		info, _ := st.Info(n)
		v, shape, err := st.Float32(n)
		require.NoError(t, err)
		if n == "layers.2.mlp.up_proj.weight" {
			v[7] = float32(math.Inf(1))
		}
		ts = append(ts, weights.NamedTensor{Name: info.Stored, DType: "F32", Shape: shape, Data: v})
	}
	require.NoError(t, st.Close())
	require.NoError(t, weights.WriteFile(p, ts, nil))

	code, _, stderr := runCLI("forward", "--model", dir, "--ids", "1,2,3", "--out", filepath.Join(dir, "o.safetensors"))
	require.Equal(t, 1, code)
	assert.Contains(t, stderr, "--check-weights")
	for _, args := range [][]string{
		{"forward", "--model", dir, "--ids", "1,2,3", "--out", filepath.Join(dir, "o.safetensors"), "--check-weights"},
		{"generate", "--model", dir, "--ids", "1,2,3", "--max-new-tokens", "1", "--check-weights"},
		{"run", "--model", dir, "--prompt", "hi", "--max-new-tokens", "1", "--check-weights", "--tokenizer", "../../testdata/tokenizer/tiny/bytelevel.json"},
	} {
		code, _, stderr := runCLI(args...)
		assert.Equal(t, 1, code, args[0])
		// The tensor as the file stores it, and the file.
		assert.Contains(t, stderr, "--check-weights: weight model.layers.2.mlp.up_proj.weight (in "+p+") has a non-finite value (+Inf at index 7)", args[0])
	}
	_, err = os.Stat(filepath.Join(dir, "o.safetensors"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// A prompt file over what one encode takes is refused as it is read, not
// after 256 MiB of it were.
func TestPromptFileCappedAtTheEncodeLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.txt")
	require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte("a"), tokenizer.MaxEncodeBytes+1), 0o644))
	code, _, stderr := runCLI("run", "--prompt-file", p, "--max-new-tokens", "1", "--compare", "none")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "--prompt-file")
	assert.Contains(t, stderr, "more than 64 MiB")
}
