// Command qwenref runs the Qwen3.5/3.6 hybrid model in pure Go on swappable
// backends, checks them against transformers' goldens, and measures what a
// missing fused kernel costs.
//
// Run `qwenref help` for the subcommands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/qwenref/qwenref/model"
)

// command is one subcommand.
type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// errUsage marks bad command-line input: exit code 2, usage already shown.
var errUsage = errors.New("usage")

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// stdin is where "-" arguments read from (tests replace it).
var stdin io.Reader = os.Stdin

// Main runs qwenref with args and returns the exit code: 0 success, 1 a
// failure, 2 bad command-line input. No panic escapes: an internal error is
// reported as such, with the stack for a bug report.
func Main(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "qwenref: internal error: %v\nplease report this with the command line and:\n%s", r, debug.Stack())
			code = 3
		}
	}()
	if err := model.CPUKernels().Err; err != nil {
		fmt.Fprintf(stderr, "qwenref: %v\n", err)
		return 2
	}
	if len(args) > 0 {
		switch args[0] {
		case "help", "-h", "-help", "--help":
			return help(args[1:], stdout, stderr)
		case "version", "-version", "--version", "-v":
			printVersion(stdout)
			return 0
		}
	}
	name := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "qwenref: unknown command %q; run 'qwenref help' for the list\n", name)
		return 2
	}
	out := &stdoutWriter{w: stdout}
	defer func(old io.Writer) { helpOut = old }(helpOut)
	helpOut = out
	err := c.run(args, out, stderr)
	var status exitStatus // the command has reported; only the code is left (doctor.go)
	if out.err != nil && (err == nil || errors.Is(err, out.err) || errors.As(err, &status)) {
		err = fmt.Errorf("writing stdout: %w", out.err) // output that did not arrive is a failure
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if errors.Is(err, errUsage) {
			return 2
		}
		if errors.As(err, &status) {
			return int(status)
		}
		fmt.Fprintf(stderr, "qwenref %s: %v\n", name, err)
		return 1
	}
	return 0
}

// stdoutWriter keeps the first error writing stdout, so that a command
// whose output did not arrive (a full disk, a closed pipe) fails.
type stdoutWriter struct {
	w   io.Writer
	err error
}

func (s *stdoutWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

// help prints the command list, or one command's help; an unknown command
// is a usage error.
func help(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return 0
	}
	if topic, ok := helpTopics[args[0]]; ok {
		topic(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "qwenref help: unknown command or topic %q; run 'qwenref help' for the list\n", args[0])
		return 2
	}
	_ = c.run([]string{"-h"}, stdout, stdout)
	return 0
}

// printVersion prints the module version, the commit it was built from,
// the Go version and build, and the kernel level.
func printVersion(w io.Writer) {
	version, commit := "(unknown)", "unknown (none stamped: built outside a git checkout, or with -buildvcs=false, e.g. in GOFLAGS)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		var rev, when, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = ", with uncommitted changes"
				}
			}
		}
		if rev != "" {
			commit = rev
			if when != "" || dirty != "" {
				commit += " (" + strings.TrimPrefix(when+dirty, ", ") + ")"
			}
		}
	}
	k := model.CPUKernels()
	fmt.Fprintf(w, "qwenref %s\ncommit  %s\ngo      %s %s/%s\nbuild   %s\nkernels %s\nbf16    %s\n",
		version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, buildName(), k.Name, k.BF16)
}

// buildName is "default" or the GOEXPERIMENT the binary was built with.
func buildName() string {
	if _, exp, ok := strings.Cut(runtime.Version(), " X:"); ok {
		return "GOEXPERIMENT=" + exp
	}
	return "default"
}

func usage(w io.Writer) {
	fmt.Fprint(w, `qwenref: a pure-Go reference implementation of the Qwen3.5/3.6 hybrid model
(Gated DeltaNet + gated attention), with swappable backends checked against
transformers.

Usage: qwenref <command> [flags]     (no command: qwenref run)

Commands:
`)
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, `
Run 'qwenref help <command>' or 'qwenref <command> -h' for its flags, and
'qwenref help backends' for the --backend grammar and kernel variants; every
command takes --threads N (sets GOMAXPROCS); -m, -p, -n and -t are short for
--model, --prompt, --max-new-tokens and --threads. 'qwenref --version' prints the
version, commit, Go build and kernel level. QWENREF_CPU=avx512|avx2|portable
(amd64) or neon|portable (arm64) forces a lower kernel level.
`)
}
