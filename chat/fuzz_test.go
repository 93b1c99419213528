package chat

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

const fuzzConversation = `[{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]},
 {"role": "assistant", "content": "<think>t</think>a", "tool_calls": [{"function": {"name": "f", "arguments": {"x": null, "y": [1, {"z": "é"}]}}}]},
 {"role": "tool", "content": "r"}, {"role": "user", "content": "again"}]`

// fuzzSeeds are the templates the tests know: Qwen3's, the style
// templates, and the Python-exactness corpus.
func fuzzSeeds(f *testing.F) []string {
	var seeds []string
	if data, err := os.ReadFile("../testdata/chat/qwen3-tokenizer_config.json"); err == nil {
		var cfg struct {
			ChatTemplate string `json:"chat_template"`
		}
		if json.Unmarshal(data, &cfg) == nil {
			seeds = append(seeds, cfg.ChatTemplate)
		}
	}
	for _, name := range []string{"qwen35-style.jinja", "qwen36-style.jinja"} {
		if data, err := os.ReadFile("../testdata/chat/" + name); err == nil {
			seeds = append(seeds, string(data))
		}
	}
	if data, err := os.ReadFile("../testdata/chat/jinja_expected.json"); err == nil {
		var corpus struct{ Cases []jinjaCase }
		if json.Unmarshal(data, &corpus) == nil {
			for _, c := range corpus.Cases {
				seeds = append(seeds, c.Template)
			}
		}
	}
	return append(seeds, ChatML, "{{ (((1))) }}", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
		"{{ 'x' * 100000000 }}", "{{ ('\\n' * 16777216).splitlines()|length }}", "{% for i in range(100) %}{% for j in range(100) %}{{ i * j }}{% endfor %}{% endfor %}")
}

func checkError(t *testing.T, err error) {
	if err == nil {
		return
	}
	if errors.Is(err, errInternal) {
		t.Fatalf("the renderer failed: %v", err)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || len(msg) > 2000 {
		t.Fatalf("error is not one short line: %q", excerpt(msg))
	}
}

// Parsing any text ends in a template or a one-line error, never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		_, err := Parse(src, "fuzz")
		checkError(t, err)
	})
}

// fuzzPeakBytes bounds what one render may allocate in all: the allocation
// budget, plus what Go's growth of slices and builders adds on top of the
// bytes charged. Counting after building broke it by gigabytes.
const fuzzPeakBytes = 3 * MaxAllocBytes

// Rendering any template that parses ends within the real budgets in text
// or a one-line error, never a panic, never past the output limit, and
// never allocating more than fuzzPeakBytes on the way.
func FuzzRender(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, src string, agp bool) {
		tpl, err := Parse(src, "fuzz")
		if err != nil {
			checkError(t, err)
			return
		}
		tpl.Timeout = 2 * time.Second
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		out, err := tpl.Render(Input{Messages: json.RawMessage(fuzzConversation), AddGenerationPrompt: agp,
			Vars: map[string]any{"enable_thinking": agp, "add_vision_id": true}})
		runtime.ReadMemStats(&after)
		checkError(t, err)
		if len(out) > MaxOutputBytes {
			t.Fatalf("%d bytes of output, over the limit", len(out))
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > fuzzPeakBytes {
			t.Fatalf("allocated %d MiB, over %d MiB", n>>20, fuzzPeakBytes>>20)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("took %v", d)
		}
	})
}

// Whatever JSON decodes, tojson writes back as the same JSON value.
func FuzzJSONRoundTrip(f *testing.F) {
	for _, s := range []string{`{"z": [1, 2.5, -0.0, 1e300], "a": {"": null}}`, `"\u2028\u0001é😀"`, `[true, false, 12345678901234567890]`, `{}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decodeJSON(data)
		if err != nil {
			return
		}
		w := newTextWriter()
		if err := dumpJSON(w, v, &jsonOptions{itemSep: ", ", keySep: ": "}, 0); err != nil {
			t.Fatalf("dump %q: %v", data, err)
		}
		var want, got any
		if json.Unmarshal(data, &want) != nil {
			return
		}
		if err := json.Unmarshal(w.b, &got); err != nil {
			t.Fatalf("tojson of %q wrote invalid JSON %q: %v", data, w.b, err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("round trip of %q: got %q", data, w.b)
		}
	})
}
