package hubtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Checkpoint reads a checkpoint directory (config.json,
// generation_config.json, the index and the shards it names, or a single
// model.safetensors; other files such as test expectations are left out)
// into a repository's files, and adds
// what a real Qwen3.5 repository also has: a tokenizer.json sized to the
// config's vocabulary, tokenizer_config.json, chat_template.jinja, and
// files qwenref does not need (README.md, the vision preprocessor configs)
// so that tests can check they are not fetched by default.
func Checkpoint(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if n := e.Name(); n == "config.json" || n == "generation_config.json" || n == "model.safetensors" || n == "model.safetensors.index.json" {
			if files[n], err = os.ReadFile(filepath.Join(dir, n)); err != nil {
				return nil, err
			}
		}
	}
	if idx := files["model.safetensors.index.json"]; idx != nil {
		var index struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(idx, &index); err != nil {
			return nil, fmt.Errorf("%s/model.safetensors.index.json: %v", dir, err)
		}
		for _, shard := range index.WeightMap {
			if files[shard] == nil {
				if files[shard], err = os.ReadFile(filepath.Join(dir, filepath.Base(shard))); err != nil {
					return nil, err
				}
			}
		}
	}
	if files["config.json"] == nil {
		return nil, fmt.Errorf("%s has no config.json", dir)
	}
	var cfg struct {
		VocabSize  int `json:"vocab_size"`
		TextConfig struct {
			VocabSize int `json:"vocab_size"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(files["config.json"], &cfg); err != nil {
		return nil, fmt.Errorf("%s/config.json: %v", dir, err)
	}
	vocab := max(cfg.VocabSize, cfg.TextConfig.VocabSize)
	if files["tokenizer.json"], err = TokenizerJSON(vocab); err != nil {
		return nil, err
	}
	files["tokenizer_config.json"] = []byte(`{"tokenizer_class": "Qwen2Tokenizer", "model_max_length": 4096}` + "\n")
	files["chat_template.jinja"] = []byte("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
	files["README.md"] = []byte("# a tiny random-weight checkpoint for tests\n")
	files["preprocessor_config.json"] = []byte(`{"image_processor_type": "Qwen2VLImageProcessorFast"}` + "\n")
	files["video_preprocessor_config.json"] = []byte(`{"video_processor_type": "Qwen3VLVideoProcessor"}` + "\n")
	return files, nil
}

// TokenizerJSON is a byte-level BPE tokenizer.json with exactly vocab
// entries: the 95 printable ASCII bytes (space as "Ġ"), then two-letter
// merges, so every id a model of that vocabulary emits decodes.
func TokenizerJSON(vocab int) ([]byte, error) {
	if vocab < 95 || vocab > 95+26*26 {
		return nil, fmt.Errorf("hubtest: vocabulary %d outside [95, %d]", vocab, 95+26*26)
	}
	tokens := map[string]int{}
	for b := 0x20; b <= 0x7e; b++ {
		s := string(rune(b))
		if b == ' ' {
			s = "Ġ"
		}
		tokens[s] = len(tokens)
	}
	var merges []string
	for a := 'a'; a <= 'z' && len(tokens) < vocab; a++ {
		for b := 'a'; b <= 'z' && len(tokens) < vocab; b++ {
			tokens[string(a)+string(b)] = len(tokens)
			merges = append(merges, string(a)+" "+string(b))
		}
	}
	return json.Marshal(map[string]any{
		"version":       "1.0",
		"added_tokens":  []any{},
		"normalizer":    map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false},
		"model":         map[string]any{"type": "BPE", "vocab": tokens, "merges": merges},
	})
}
