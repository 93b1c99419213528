// Command snippets runs the shell and Python blocks of the repository's
// Markdown files that carry a tag (see package docsnippets for the tags):
//
//	go run ./internal/docsnippets/cmd/snippets -tag run-cpu          # what scripts/test runs
//	snippets -tag run-gpu -qwenref .build/qwenref                    # scripts/gpu-check snippets
//	go run ./internal/docsnippets/cmd/snippets -list                 # every block and its tag
//
// Each block prints PASS or FAIL with its file:line and seconds; a failing
// block's output follows. The exit status is 0 when every block passed, 1
// when one failed, was skipped for the budget or a fence is malformed, 2 on
// a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"syscall"
	"time"

	"github.com/qwenref/qwenref/internal/docsnippets"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("snippets", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tagName := fs.String("tag", "", "the blocks to run: run-cpu or run-gpu")
	root := fs.String("root", "", "repository root (default: the nearest directory above the working one with go.mod)")
	qwenref := fs.String("qwenref", "", "a built qwenref to put on PATH (default: go build ./cmd/qwenref)")
	python := fs.String("python", "python3", "interpreter for Python blocks")
	timeout := fs.Duration("timeout", 2*time.Minute, "the most one block may take")
	budget := fs.Duration("budget", 5*time.Minute, "the most all blocks together may take")
	only := fs.String("run", "", "run only the blocks whose file:line matches this regular expression")
	list := fs.Bool("list", false, "list every block with its tag and the counts, run nothing")
	verbose := fs.Bool("v", false, "print every block's output, not only a failing one's")
	keep := fs.Bool("keep", false, "keep the work directory and print its path")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "snippets: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var tag docsnippets.Tag
	if !*list {
		var err error
		if tag, err = docsnippets.ParseTag(*tagName); err != nil {
			fmt.Fprintf(stderr, "snippets: -tag: %v\n", err)
			return 2
		}
	}
	var filter *regexp.Regexp
	if *only != "" {
		var err error
		if filter, err = regexp.Compile(*only); err != nil {
			fmt.Fprintf(stderr, "snippets: -run: %v\n", err)
			return 2
		}
	}
	dir := *root
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintf(stderr, "snippets: %v\n", err)
			return 1
		}
		if dir, err = docsnippets.FindRoot(wd); err != nil {
			fmt.Fprintf(stderr, "snippets: %v (pass -root)\n", err)
			return 2
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		fmt.Fprintf(stderr, "snippets: %v\n", err)
		return 1
	}
	blocks, problems, err := docsnippets.Load(dir)
	if err != nil {
		fmt.Fprintf(stderr, "snippets: %v\n", err)
		return 1
	}
	for _, p := range problems {
		fmt.Fprintf(stderr, "snippets: %v\n", p)
	}
	if *list {
		printList(stdout, blocks)
	}
	if len(problems) > 0 {
		return 1
	}
	if *list {
		return 0
	}
	plan := selectPlan(docsnippets.Plan(blocks, tag), filter)
	if len(plan) == 0 {
		fmt.Fprintf(stdout, "no %s blocks to run\n", tag)
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	work, err := os.MkdirTemp("", "qwenref-snippets-")
	if err != nil {
		fmt.Fprintf(stderr, "snippets: %v\n", err)
		return 1
	}
	if *keep {
		fmt.Fprintf(stdout, "work directory: %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	bin := filepath.Join(work, "bin")
	if err := provideQwenref(ctx, dir, bin, *qwenref, stdout); err != nil {
		fmt.Fprintf(stderr, "snippets: %v\n", err)
		return 1
	}
	blocksDir := filepath.Join(work, "docs")
	if err := os.Mkdir(blocksDir, 0o755); err != nil {
		fmt.Fprintf(stderr, "snippets: %v\n", err)
		return 1
	}
	_, err = docsnippets.Run(ctx, plan, docsnippets.Options{
		Root: dir, Tag: tag, Work: blocksDir, BinDir: bin, Python: *python,
		BlockTimeout: *timeout, Budget: *budget, Out: stdout, Verbose: *verbose,
	})
	if err != nil {
		fmt.Fprintf(stderr, "snippets: %v\n", err)
		return 1
	}
	return 0
}

// selectPlan keeps the blocks filter matches, and the setup blocks of the
// files that still have one.
func selectPlan(plan []docsnippets.Result, filter *regexp.Regexp) []docsnippets.Result {
	if filter == nil {
		return plan
	}
	files := map[string]bool{}
	for _, r := range plan {
		if !r.Setup && filter.MatchString(r.Block.Where()) {
			files[r.Block.File] = true
		}
	}
	var out []docsnippets.Result
	for _, r := range plan {
		if files[r.Block.File] && (r.Setup || filter.MatchString(r.Block.Where())) {
			out = append(out, r)
		}
	}
	return out
}

// provideQwenref puts qwenref into bin: a link to a given binary, or one
// built from the repository.
func provideQwenref(ctx context.Context, root, bin, given string, stdout io.Writer) error {
	if err := os.Mkdir(bin, 0o755); err != nil {
		return err
	}
	dst := filepath.Join(bin, "qwenref")
	if given != "" {
		abs, err := filepath.Abs(given)
		if err != nil {
			return err
		}
		if info, err := os.Stat(abs); err != nil || info.IsDir() {
			return fmt.Errorf("-qwenref %s: not a file", given)
		}
		return os.Symlink(abs, dst)
	}
	if _, err := exec.LookPath("go"); err != nil {
		return errors.New("go is not on PATH to build qwenref: pass -qwenref PATH")
	}
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dst, "./cmd/qwenref")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/qwenref: %v\n%s", err, out)
	}
	fmt.Fprintf(stdout, "built qwenref (%.1fs)\n", time.Since(t0).Seconds())
	return nil
}

// printList writes every shell and Python block with its tag, then the
// counts per tag.
func printList(w io.Writer, blocks []docsnippets.Block) {
	counts := map[string]int{}
	for _, b := range blocks {
		if !b.Runnable() {
			continue
		}
		line := fmt.Sprintf("%-36s %-7s %s", b.Where(), b.Lang, b.Tag)
		if b.Tag == docsnippets.NotRun {
			line += ": " + b.Reason
		}
		fmt.Fprintln(w, line)
		counts[b.Tag.String()]++
	}
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	sort.Strings(names)
	total := 0
	for _, k := range names {
		fmt.Fprintf(w, "%s: %d\n", k, counts[k])
		total += counts[k]
	}
	fmt.Fprintf(w, "shell and Python blocks: %d\n", total)
}
