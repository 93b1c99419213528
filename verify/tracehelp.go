package verify

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/qwenref/qwenref/model"
)

// StagesHelp is trace's help's first paragraph: what trace prints and
// the stages of each kind of layer, named from the layers' own lists.
func StagesHelp() string {
	gdn := model.StageNames(model.LinearAttention, false)
	attn := model.StageNames(model.FullAttention, false)
	moe := model.StageNames(model.LinearAttention, true)
	text := `Runs a short prompt through the model and prints its intermediates in
execution order: for each stage its name, shape, L2 norm ‖x‖₂, min, max and
first few values. By default it shows one layer (--layer, default 0); --all
shows every stage from "embeddings" to "logits". Stage names are those of
the golden files: "layers.N.<stage>", e.g. for a Gated DeltaNet layer ` +
		strings.Join(gdn, ", ") + "; for an attention layer " + strings.Join(without(attn, gdn), ", ") +
		" instead of the GDN stages; a sparse (MoE) layer adds " + strings.Join(without(moe, gdn), ", ") + " after mlp_in."
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) > 75 {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return strings.Join(append(lines, line), "\n")
}

// without is names less those in drop, in order.
func without(names, drop []string) []string {
	var out []string
	for _, n := range names {
		if !slices.Contains(drop, n) {
			out = append(out, n)
		}
	}
	return out
}

// Describe formats the stage: name, shape, ‖x‖₂, min, max and the
// first n values, each rounded to 4 significant digits.
func (s TracedStage) Describe(n int) string {
	var ss float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range s.Data {
		f := float64(v)
		ss += f * f
		lo, hi = math.Min(lo, f), math.Max(hi, f)
	}
	vals := make([]string, 0, min(n, len(s.Data))+1)
	for _, v := range s.Data[:min(n, len(s.Data))] {
		vals = append(vals, strconv.FormatFloat(float64(v), 'g', 4, 32))
	}
	if len(s.Data) > n {
		vals = append(vals, "…")
	}
	return fmt.Sprintf("%-26s %-16s ‖x‖₂=%-10.4g min=%-10.4g max=%-10.4g [%s]",
		s.Name, fmt.Sprint(s.Shape), math.Sqrt(ss), lo, hi, strings.Join(vals, " "))
}
