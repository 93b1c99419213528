package docsnippets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Options configure a run of the documented blocks.
type Options struct {
	Root         string        // repository root; blocks see its top-level entries in their work directory
	Tag          Tag           // RunCPU or RunGPU: the blocks to run
	Work         string        // an empty directory the run may fill (one subdirectory per Markdown file)
	BinDir       string        // put first on PATH (it holds qwenref)
	Python       string        // interpreter for Python blocks (default python3)
	BlockTimeout time.Duration // the most one block may take (default 2 minutes)
	Budget       time.Duration // the most the whole run may take (default 5 minutes)
	Env          []string      // extra KEY=VALUE pairs for every block
	Out          io.Writer     // progress: one line per block, the output of a failing one
	Verbose      bool          // print every block's output, not only a failing one's
}

// Result is the outcome of one block.
type Result struct {
	Block   Block
	Setup   bool // a run-cpu block run before a later run-gpu block of the same file
	Err     error
	Elapsed time.Duration
	Skipped bool // not started: the budget was spent
}

// tmpPath matches /tmp/ where it starts a path in a command line.
var tmpPath = regexp.MustCompile(`(^|[\s="'(:,])/tmp/`)

// minBlockTime is the least time left in the budget for which another
// block is started.
const minBlockTime = 5 * time.Second

// Plan returns the blocks a run of tag executes, in order: the blocks with
// that tag and, for run-gpu, the run-cpu blocks that come before a run-gpu
// block in the same file (they make its inputs, e.g. test vectors).
func Plan(blocks []Block, tag Tag) []Result {
	lastGPU := map[string]int{}
	for _, b := range blocks {
		if b.Tag == RunGPU {
			lastGPU[b.File] = b.Line
		}
	}
	var plan []Result
	for _, b := range blocks {
		switch {
		case b.Tag == tag:
			plan = append(plan, Result{Block: b})
		case tag == RunGPU && b.Tag == RunCPU && b.Line < lastGPU[b.File]:
			plan = append(plan, Result{Block: b, Setup: true})
		}
	}
	return plan
}

// Run executes the planned blocks. Each Markdown file gets one fresh work
// directory under opt.Work, shared by its blocks in document order, holding
// links to the repository's top-level entries (so ./cmd/qwenref and
// testdata/... resolve) and its own tmp and home: a block's /tmp/ paths are
// rewritten into that tmp, and HOME and TMPDIR point inside it. Shell
// blocks run under bash -euo pipefail, Python blocks with opt.Python. It
// returns every result and an error when any block failed or was skipped.
func Run(ctx context.Context, plan []Result, opt Options) ([]Result, error) {
	if opt.Python == "" {
		opt.Python = "python3"
	}
	if opt.BlockTimeout <= 0 {
		opt.BlockTimeout = 2 * time.Minute
	}
	if opt.Budget <= 0 {
		opt.Budget = 5 * time.Minute
	}
	if opt.Out == nil {
		opt.Out = io.Discard
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return nil, errors.New("bash is not on PATH: shell blocks need it")
	}
	env := blockEnv(opt)
	start := time.Now()
	dirs := map[string]string{}
	failed := map[string]bool{} // files whose setup failed: their later blocks cannot work
	for i := range plan {
		r := &plan[i]
		b := r.Block
		left := opt.Budget - time.Since(start)
		if left < minBlockTime {
			r.Skipped = true
			r.Err = fmt.Errorf("not started: the %v budget is spent", opt.Budget)
			fmt.Fprintf(opt.Out, "SKIP  %s  (budget spent)\n", b.Where())
			continue
		}
		if failed[b.File] {
			r.Skipped = true
			r.Err = errors.New("not started: an earlier block of this file failed")
			fmt.Fprintf(opt.Out, "SKIP  %s  (an earlier block of %s failed)\n", b.Where(), b.File)
			continue
		}
		dir, ok := dirs[b.File]
		if !ok {
			dir, err = workDir(opt, len(dirs), b.File)
			if err != nil {
				return plan, err
			}
			dirs[b.File] = dir
		}
		timeout := min(opt.BlockTimeout, left)
		out := &tailBuffer{max: 64 << 10}
		t0 := time.Now()
		r.Err = runBlock(ctx, b, dir, bash, opt.Python, env, timeout, out)
		r.Elapsed = time.Since(t0)
		status := "PASS"
		if r.Err != nil {
			status = "FAIL"
			if r.Setup {
				failed[b.File] = true
			}
		}
		label := b.Tag.String()
		if r.Setup {
			label += ", setup"
		}
		fmt.Fprintf(opt.Out, "%s  %s  %s %s  %.1fs\n", status, b.Where(), b.Lang, label, r.Elapsed.Seconds())
		if r.Err != nil || opt.Verbose {
			if r.Err != nil {
				fmt.Fprintf(opt.Out, "      %v\n", r.Err)
			}
			for _, l := range lastLines(out.String(), 40) {
				fmt.Fprintf(opt.Out, "    | %s\n", l)
			}
		}
	}
	passed, bad := 0, 0
	for _, r := range plan {
		if r.Err == nil {
			passed++
		} else {
			bad++
		}
	}
	fmt.Fprintf(opt.Out, "%d passed, %d failed or skipped, %.1fs (budget %v)\n", passed, bad, time.Since(start).Seconds(), opt.Budget)
	if bad > 0 {
		return plan, fmt.Errorf("%d of %d documented blocks failed or were skipped", bad, len(plan))
	}
	return plan, nil
}

// workDir makes the n-th file's work directory: links to the root's
// top-level entries (hidden ones left out) beside its own tmp and home.
func workDir(opt Options, n int, file string) (string, error) {
	name := fmt.Sprintf("%02d-%s", n, strings.NewReplacer("/", "_", ".", "_").Replace(file))
	dir := filepath.Join(opt.Work, name)
	for _, d := range []string{dir, filepath.Join(dir, "tmp"), filepath.Join(dir, "home"), filepath.Join(dir, ".snippets")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	entries, err := os.ReadDir(opt.Root)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := os.Symlink(filepath.Join(opt.Root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return "", fmt.Errorf("linking %s into the work directory: %v", e.Name(), err)
		}
	}
	return dir, nil
}

// blockEnv is the environment every block starts from: the caller's, with
// HOME, TMPDIR and the Hugging Face cache variables replaced per block
// (runBlock adds them), the Go caches pinned to where they were (a moved
// HOME must not send go to an empty cache), PATH led by opt.BinDir, and no
// bytecode written into the repository's python/.
func blockEnv(opt Options) []string {
	drop := map[string]bool{"HOME": true, "TMPDIR": true, "PWD": true, "OLDPWD": true, "CDPATH": true,
		"BASH_ENV": true, "ENV": true, "HF_HOME": true, "HF_HUB_CACHE": true, "HUGGINGFACE_HUB_CACHE": true,
		"XDG_CACHE_HOME": true, "PATH": true}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			env = append(env, kv)
		}
	}
	path := os.Getenv("PATH")
	if opt.BinDir != "" {
		path = opt.BinDir + string(os.PathListSeparator) + path
	}
	env = append(env, "PATH="+path, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	env = append(env, goCacheEnv()...)
	return append(env, opt.Env...)
}

// goCacheEnv returns GOCACHE, GOPATH and GOMODCACHE as go resolves them
// now, for those not set already; nothing when go is not installed.
func goCacheEnv() []string {
	if _, err := exec.LookPath("go"); err != nil {
		return nil
	}
	out, err := exec.Command("go", "env", "GOCACHE", "GOPATH", "GOMODCACHE").Output()
	if err != nil {
		return nil
	}
	vals := strings.Split(strings.TrimSpace(string(out)), "\n")
	var env []string
	for i, k := range []string{"GOCACHE", "GOPATH", "GOMODCACHE"} {
		if i < len(vals) && os.Getenv(k) == "" && vals[i] != "" {
			env = append(env, k+"="+vals[i])
		}
	}
	return env
}

// Script returns what runs for the block in dir: the shell commands (a
// console block's "$ " lines) or the Python source, with /tmp/ paths moved
// into dir/tmp.
func Script(b Block, dir string) (string, error) {
	body := b.Body
	if b.Lang == "console" {
		var cmds []string
		cont := false
		for _, l := range strings.Split(body, "\n") {
			switch {
			case strings.HasPrefix(l, "$ "):
				cmds = append(cmds, strings.TrimPrefix(l, "$ "))
			case cont:
				cmds = append(cmds, l)
			default:
				continue
			}
			cont = strings.HasSuffix(l, "\\")
		}
		if len(cmds) == 0 {
			return "", errors.New(`console block without a "$ " command`)
		}
		body = strings.Join(cmds, "\n") + "\n"
	}
	tmp := filepath.ToSlash(filepath.Join(dir, "tmp")) + "/"
	body = tmpPath.ReplaceAllString(body, "${1}"+strings.ReplaceAll(tmp, "$", "$$"))
	if b.Shell() {
		body = "set -euo pipefail\n" + body
	}
	return body, nil
}

// runBlock runs one block in dir under a deadline, its output into out.
func runBlock(ctx context.Context, b Block, dir, bash, python string, env []string, timeout time.Duration, out io.Writer) error {
	script, err := Script(b, dir)
	if err != nil {
		return err
	}
	ext := ".sh"
	if b.Python() {
		ext = ".py"
	}
	file := filepath.Join(dir, ".snippets", fmt.Sprintf("line%d%s", b.Line, ext))
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var cmd *exec.Cmd
	if b.Python() {
		cmd = exec.CommandContext(ctx, python, file)
	} else {
		cmd = exec.CommandContext(ctx, bash, "--noprofile", "--norc", file)
	}
	cmd.Dir = dir
	cmd.Env = append(env, "HOME="+filepath.Join(dir, "home"), "TMPDIR="+filepath.Join(dir, "tmp"), "PWD="+dir)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = out, out
	ownGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("timed out after %v", timeout.Round(time.Second))
	}
	if err != nil {
		return fmt.Errorf("exit: %v", err)
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }

// lastLines returns the last n lines of s.
func lastLines(s string, n int) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
