package docsnippets

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestEveryDocBlockIsTagged fails, naming file:line, for every shell or
// Python block of the repository's Markdown files without a tag, every
// unknown or malformed tag and every fenced block without a language.
func TestEveryDocBlockIsTagged(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := FindRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	blocks, problems, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	// The walk must see the docs, or the check above proves nothing.
	files := map[string]bool{}
	count := map[Tag]int{}
	for _, b := range blocks {
		files[b.File] = true
		if b.Runnable() {
			count[b.Tag]++
		}
	}
	for _, f := range []string{"README.md", "docs/kernel-engineers.md", "docs/golden-format.md"} {
		if !files[f] {
			t.Errorf("%s has no code blocks or was not found: the walk is broken", f)
		}
	}
	if count[RunCPU] == 0 || count[RunGPU] == 0 || count[NotRun] == 0 {
		t.Errorf("blocks per tag %v: want some of each", count)
	}
}

// TestEveryDocBlockParses checks the syntax of every shell block (bash -n)
// and Python block (ast.parse), not-run and run-gpu ones included: those
// are never executed here, but a typo in them still reaches users.
func TestEveryDocBlockParses(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := FindRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	blocks, _, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	bash, _ := exec.LookPath("bash")
	python, _ := exec.LookPath("python3")
	checked := 0
	for _, b := range blocks {
		var cmd *exec.Cmd
		switch {
		case b.Shell() && bash != "":
			cmd = exec.Command(bash, "-n")
		case b.Python() && python != "":
			cmd = exec.Command(python, "-c", "import ast, sys; ast.parse(sys.stdin.read())")
		default:
			continue
		}
		script, err := Script(b, "/work")
		if err != nil {
			t.Errorf("%s: %v", b.Where(), err)
			continue
		}
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %s block does not parse: %v\n%s", b.Where(), b.Lang, err, out)
		}
		checked++
	}
	if bash != "" && checked == 0 {
		t.Error("no block was checked")
	}
}
