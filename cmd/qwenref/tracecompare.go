package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/verify"
	"github.com/qwenref/qwenref/weights"
)

// reportForced runs the teacher-forced comparison and prints it: exit 4
// (via exitStatus) at a failing stage, an error when nothing compared.
func reportForced(w io.Writer, m *model.Model, be *model.Backend, ref *weights.Store, refPath string, ids []int, bf16, asJSON, all bool, layer int) error {
	rep, err := verify.TeacherForced(m, be, ref, refPath, ids, bf16)
	if err != nil {
		return fmt.Errorf("--compare %s: %w", refPath, err)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		checks := rep.Checks
		fmt.Fprintf(w, "trace --compare: %d tokens on %s against %s; %d layers (%s), each teacher-forced; %s error model\n",
			len(ids), be.Name, refPath, len(m.Blocks), verify.LayerKinds(m), rep.Precision)
		prefix := fmt.Sprintf("layers.%d.", layer)
		for i, c := range checks {
			if all || strings.HasPrefix(c.Stage, prefix) || (rep.First == &checks[i]) {
				mark := ""
				if rep.First == &checks[i] {
					mark = "   ← first failure"
				}
				fmt.Fprintf(w, "%s%s\n", c, mark)
			}
		}
		worst := verify.Worst(checks)
		switch rep.Verdict {
		case "agree":
			fmt.Fprintf(w, "all %d checks agree (worst: %s, rel L2 %.2e of its bar %.1e)\n", len(checks), worst.Stage, worst.RelL2, worst.TolRelL2)
		case "differ":
			fmt.Fprintf(w, "%d of %d checks differ; the first is %s (%s): rel L2 %.3e (bar %.1e), scaled max-abs %.3e (bar %.1e)\n",
				rep.Failed, len(checks), rep.First.Stage, rep.First.Mode, rep.First.RelL2, rep.First.TolRelL2, rep.First.MaxAbsScaled, rep.First.TolMaxAbs)
		}
	}
	switch rep.Verdict {
	case "nothing-compared":
		return fmt.Errorf("--compare %s holds no stage this model produces (layers.N.input is needed to teacher-force a layer): nothing was compared; is it a trace or golden of this model?", refPath)
	case "differ":
		return exitStatus(4)
	}
	return nil
}
