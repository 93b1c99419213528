package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/model"
)

func init() {
	register(&command{name: "generate", summary: "continue token ids (greedy or sampled) and print the new ids", run: runGenerate})
}

// parseIDList parses "1,2,3" (spaces allowed).
func parseIDList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty id list: want e.g. --ids 1,2,3")
	}
	var ids []int
	for i, f := range strings.Split(s, ",") {
		if i >= maxIDs {
			return nil, fmt.Errorf("more than %d token ids (the limit; see docs/limits.md)", maxIDs)
		}
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 || !isDigits(strings.TrimSpace(f)) {
			return nil, fmt.Errorf("id %d (%q) is not a non-negative integer", i, strings.TrimSpace(f))
		}
		ids = append(ids, v)
	}
	return ids, nil
}

func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", "[--model DIR] (--ids 1,2,3 | --ids-json F) [--max-new-tokens N] [--greedy] [--backend B] [--json]", `
Continues a sequence of token ids with cached decoding (one prefill, then one
token at a time from the conv/recurrent states and the KV cache) and prints
the new ids. Generation stops at --max-new-tokens or at an EOS id from
config.json / generation_config.json (the EOS token is included).

The ids come from --ids 1,2,3 (or a JSON array), --ids-json FILE (one row),
or stdin with "-". Sampling defaults come from generation_config.json as in
transformers (greedy without one, or with do_sample false), which decodes
token for token as transformers' generate does; --temperature, --top-k,
--top-p and --seed override, --greedy forces argmax. No tokenizer is needed.

Examples:
  qwenref generate --model testdata/golden/hub-bf16-sharded --ids 5,17,42 --max-new-tokens 8 --json
  qwenref generate --ids 9707,11 --temperature 0.8 --top-p 0.9 --seed 7`, stderr)
	dir := fs.String("model", "", "checkpoint directory (default: the bundled random-weight demo)")
	idsFlag := fs.String("ids", "", "prompt token ids, comma-separated or a JSON array (- reads stdin)")
	idsJSON := fs.String("ids-json", "", "JSON file with the prompt ids, [[id, ...]] or [id, ...] (- reads stdin)")
	backend := fs.String("backend", defaultBackend(), fmt.Sprintf("kernels to run on: %v", model.BackendNames()))
	plugins := addPluginFlag(fs)
	asJSON := fs.Bool("json", false, "print the new ids as a JSON array (and nothing else on stdout)")
	greedy := fs.Bool("greedy", false, "force greedy decoding (overrides --temperature)")
	sf := addSampleFlags(fs, 16)
	mem := addMemoryFlag(fs)
	checkW := addCheckWeightsFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := resolveModelFlag(dir, stderr); err != nil {
		return err
	}
	rows, err := readIDs(*idsFlag, *idsJSON)
	if errors.Is(err, errNoIDs) {
		return usageError(fs, stderr, "missing --ids (or --ids-json)")
	}
	if err != nil {
		return err
	}
	if len(rows) != 1 {
		return usageError(fs, stderr, "generate continues one sequence, got %d rows", len(rows))
	}
	ids := rows[0]
	if err := loadPlugins(plugins); err != nil {
		return err
	}
	be, err := model.NewBackend(*backend)
	if err != nil {
		return err
	}
	defer be.Close()
	m, _, err := loadModelAndTokenizer(*dir, "", false, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.CheckIDs(ids); err != nil {
		return fmt.Errorf("--ids: %w", err)
	}
	if *sf.maxNew < 0 {
		return usageError(fs, stderr, "--max-new-tokens %d: must not be negative", *sf.maxNew)
	}
	if err := checkRun(m.Config, mem, 1, len(ids)+*sf.maxNew, len(ids), "--ids plus --max-new-tokens"); err != nil {
		return err
	}
	if *checkW {
		if err := checkWeights(m, stderr); err != nil {
			return err
		}
	}
	s, err := sf.resolve(fs, *dir, stderr)
	if err != nil {
		return err
	}
	if *greedy {
		s.Temperature = 0
	}
	res, err := m.Generate(ids, be, model.GenerateOptions{MaxNewTokens: *sf.maxNew, Sampling: s})
	if err != nil {
		return err
	}
	if *asJSON {
		out, _ := json.Marshal(res.NewIDs)
		fmt.Fprintln(stdout, string(out))
	} else {
		strs := make([]string, len(res.NewIDs))
		for i, id := range res.NewIDs {
			strs[i] = strconv.Itoa(id)
		}
		fmt.Fprintln(stdout, strings.Join(strs, ","))
	}
	fmt.Fprintf(stderr, "[%s · backend %s]\n", timing(res), be.Name)
	return nil
}
