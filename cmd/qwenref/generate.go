package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
)

func init() {
	register(&command{name: "generate", summary: "continue token ids (greedy or sampled) and print the new ids", run: runGenerate})
}

func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", "[--model DIR] (--ids 1,2,3 | --ids-json F) [--max-new-tokens N] [--greedy] [--backend B] [--json]", `
Continues a sequence of token ids with cached decoding (one prefill, then one
token at a time from the conv/recurrent states and the KV cache) and prints
the new ids. Generation stops at --max-new-tokens or at an EOS id from
config.json / generation_config.json (the EOS token is included).

The ids come from --ids 1,2,3 (or a JSON array), --ids-json FILE (one row),
or stdin with "-". Sampling is run's: generation_config.json's as
transformers' generate builds it (greedy without one, or with do_sample
false, which decodes token for token as transformers does), with the flags
applied first; --greedy forces argmax. No tokenizer is needed.

Examples:
  qwenref generate --model testdata/golden/hub-bf16-sharded --ids 5,17,42 --max-new-tokens 8 --json
  qwenref generate --ids 9707,11 --temperature 0.8 --top-p 0.9 --seed 7`, stderr)
	dir := addModelFlag(fs, demoModel)
	idf := addIDFlags(fs)
	backend := addBackendFlag(fs)
	plugins := addPluginFlag(fs)
	asJSON := fs.Bool("json", false, "print the new ids as a JSON array (and nothing else on stdout)")
	sf := addSampleFlags(fs, 16)
	mem := addMemoryFlag(fs)
	checkW := addCheckWeightsFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := sf.checkMaxNew(fs, stderr); err != nil {
		return err
	}
	if err := resolveModelFlag(dir, stderr); err != nil { // before reading ids: a bad --model says so first
		return err
	}
	rows, err := idf.read()
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
	op, err := openFlags{dir, backend, plugins, mem, checkW}.open(model.OpenOptions{IDs: rows, IDsName: idf.name(),
		Run: &model.RunSize{Rows: 1, Tokens: len(ids) + *sf.maxNew, LogitRows: 1, Prefill: len(ids), What: idf.name() + " plus --max-new-tokens"}, BoundHeap: true}, nil, stderr, stderr)
	if err != nil {
		return err
	}
	defer op.Close()
	g, err := sf.settings(fs, op.Dir, stderr)
	if err != nil {
		return err
	}
	res, err := generate.Generate(op.Model, ids, op.Backend, generate.GenerateOptions{MaxNewTokens: *sf.maxNew, Sampling: g.Config, Seed: g.Seed})
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
	fmt.Fprintf(stderr, "[%s · backend %s]\n", res, op.Backend.Name)
	return nil
}
