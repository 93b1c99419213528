package docsnippets

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// needBash skips where the runner cannot run shell blocks.
func needBash(t *testing.T) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the runner's shell blocks need bash and a Unix process group")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not on PATH")
	}
}

// fakeRoot is a repository root with one file and a bin directory holding
// a stand-in qwenref.
func fakeRoot(t *testing.T) (root, bin string) {
	t.Helper()
	root, bin = t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "data.txt"), []byte("from the repo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "qwenref"), []byte("#!/bin/sh\necho fake qwenref \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root, bin
}

func TestRunBlocks(t *testing.T) {
	needBash(t)
	root, bin := fakeRoot(t)
	home, _ := os.UserHomeDir()
	blocks := []Block{
		// The repository's entries resolve; /tmp/ and HOME land in the block's own directory.
		{File: "a.md", Line: 1, Lang: "sh", Tag: RunCPU, Body: `grep -q "from the repo" data.txt
qwenref golden | grep -q "fake qwenref golden"
echo made > /tmp/made.txt
test -f "$TMPDIR/made.txt"
case "$HOME" in "$PWD"/home) ;; *) echo "HOME=$HOME is not $PWD/home"; exit 1;; esac
test "$HOME" != "` + home + `"
echo out > written.txt
`},
		// The next block of the same file sees what the first wrote.
		{File: "a.md", Line: 9, Lang: "sh", Tag: RunCPU, Body: "test -f written.txt && test -f /tmp/made.txt\n"},
		// pipefail: a failing stage fails the block.
		{File: "b.md", Line: 3, Lang: "sh", Tag: RunCPU, Body: "false | true\necho not reached\n"},
		// nounset.
		{File: "c.md", Line: 4, Lang: "bash", Tag: RunCPU, Body: "echo $UNSET_VARIABLE_IN_A_SNIPPET\n"},
		// A fresh file gets a fresh directory: a.md's files are not there.
		{File: "d.md", Line: 5, Lang: "sh", Tag: RunCPU, Body: "test ! -e written.txt\n"},
	}
	var out bytes.Buffer
	work := t.TempDir()
	res, err := Run(context.Background(), Plan(blocks, RunCPU), Options{
		Root: root, Tag: RunCPU, Work: work, BinDir: bin, Out: &out,
		BlockTimeout: 30 * time.Second, Budget: time.Minute,
	})
	if err == nil || !strings.Contains(err.Error(), "2 of 5") {
		t.Errorf("Run error %v, want 2 of 5 failed", err)
	}
	wantFail := map[string]bool{"b.md:3": true, "c.md:4": true}
	for _, r := range res {
		if failed := r.Err != nil; failed != wantFail[r.Block.Where()] {
			t.Errorf("%s: err %v, want failure %v", r.Block.Where(), r.Err, wantFail[r.Block.Where()])
		}
	}
	for _, s := range []string{"PASS  a.md:1  sh run-cpu", "FAIL  b.md:3  sh run-cpu", "FAIL  c.md:4", "UNSET_VARIABLE_IN_A_SNIPPET: unbound variable", "3 passed, 2 failed"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	if strings.Contains(out.String(), "not reached") {
		t.Errorf("the block went on after a failing pipeline:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(root, "written.txt")); err == nil {
		t.Error("a block wrote into the repository root")
	}
}

func TestRunPython(t *testing.T) {
	needBash(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH")
	}
	root, bin := fakeRoot(t)
	blocks := []Block{
		{File: "p.md", Line: 2, Lang: "python", Tag: RunGPU, Body: "import os\nassert open('data.txt').read() == 'from the repo\\n'\nopen('/tmp/p', 'w').write('x')\nassert os.path.exists(os.environ['TMPDIR'] + '/p')\n"},
		{File: "p.md", Line: 8, Lang: "python", Tag: RunGPU, Body: "raise SystemExit('python block failed on purpose')\n"},
	}
	var out bytes.Buffer
	res, err := Run(context.Background(), Plan(blocks, RunGPU), Options{
		Root: root, Tag: RunGPU, Work: t.TempDir(), BinDir: bin, Python: py, Out: &out,
	})
	if err == nil || res[0].Err != nil || res[1].Err == nil {
		t.Fatalf("err %v, results %+v\n%s", err, res, out.String())
	}
	if !strings.Contains(out.String(), "python block failed on purpose") {
		t.Errorf("the failing block's output is not shown:\n%s", out.String())
	}
}

func TestRunTimeoutKillsTheBlocksChildren(t *testing.T) {
	needBash(t)
	root, bin := fakeRoot(t)
	blocks := []Block{{File: "t.md", Line: 1, Lang: "sh", Tag: RunCPU, Body: "sleep 60 &\nsleep 60\n"}}
	t0 := time.Now()
	var out bytes.Buffer
	res, err := Run(context.Background(), Plan(blocks, RunCPU), Options{
		Root: root, Tag: RunCPU, Work: t.TempDir(), BinDir: bin, Out: &out,
		BlockTimeout: time.Second, Budget: time.Minute,
	})
	if err == nil || res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "timed out after 1s") {
		t.Fatalf("err %v, result %v, want a timeout", err, res[0].Err)
	}
	// The background sleep holds the output pipe open: only killing the
	// group (or WaitDelay) lets Run return this soon.
	if d := time.Since(t0); d > 15*time.Second {
		t.Errorf("Run took %v after a 1s timeout", d)
	}
}

func TestRunBudget(t *testing.T) {
	needBash(t)
	root, bin := fakeRoot(t)
	blocks := []Block{
		{File: "a.md", Line: 1, Lang: "sh", Tag: RunGPU, Body: "sleep 1\n"},
		{File: "a.md", Line: 5, Lang: "sh", Tag: RunGPU, Body: "true\n"},
	}
	var out bytes.Buffer
	res, err := Run(context.Background(), Plan(blocks, RunGPU), Options{
		Root: root, Tag: RunGPU, Work: t.TempDir(), BinDir: bin, Out: &out,
		Budget: minBlockTime + 500*time.Millisecond,
	})
	if err == nil || res[0].Err != nil || !res[1].Skipped {
		t.Fatalf("err %v, results %+v, want the second block skipped for the budget\n%s", err, res, out.String())
	}
	if !strings.Contains(out.String(), "SKIP  a.md:5  (budget spent)") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestFailedSetupSkipsTheFile(t *testing.T) {
	needBash(t)
	root, bin := fakeRoot(t)
	blocks := []Block{
		{File: "g.md", Line: 1, Lang: "sh", Tag: RunCPU, Body: "exit 3\n"},
		{File: "g.md", Line: 4, Lang: "sh", Tag: RunGPU, Body: "true\n"},
	}
	var out bytes.Buffer
	res, err := Run(context.Background(), Plan(blocks, RunGPU), Options{
		Root: root, Tag: RunGPU, Work: t.TempDir(), BinDir: bin, Out: &out,
	})
	if err == nil || !res[0].Setup || res[0].Err == nil || !res[1].Skipped {
		t.Fatalf("err %v, results %+v\n%s", err, res, out.String())
	}
	if !strings.Contains(out.String(), "FAIL  g.md:1  sh run-cpu, setup") {
		t.Errorf("output:\n%s", out.String())
	}
}
