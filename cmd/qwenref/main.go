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
	"runtime/debug"
	"sort"
	"strings"
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

// Main runs qwenref with args and returns the exit code. No panic escapes:
// an internal error is reported as such, with the stack for a bug report.
func Main(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "qwenref: internal error: %v\nplease report this with the command line and:\n%s", r, debug.Stack())
			code = 3
		}
	}()
	name := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if name == "help" || name == "-h" || name == "--help" {
		if len(args) > 0 {
			if c, ok := commands[args[0]]; ok {
				_ = c.run([]string{"-h"}, stdout, stdout)
				return 0
			}
		}
		usage(stdout)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "qwenref: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	if err := c.run(args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if errors.Is(err, errUsage) {
			return 2
		}
		var status exitStatus // the command has reported; only the code is left (doctor.go)
		if errors.As(err, &status) {
			return int(status)
		}
		fmt.Fprintf(stderr, "qwenref %s: %v\n", name, err)
		return 1
	}
	return 0
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
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, "\nRun 'qwenref help <command>' or 'qwenref <command> -h' for its flags.\n")
}

// newFlags makes a FlagSet whose -h output teaches: a synopsis, a longer
// description, then the flags.
func newFlags(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: qwenref %s %s\n\n%s\n\nFlags:\n", name, synopsis, strings.TrimSpace(about))
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses and maps flag errors to errUsage (already printed).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

// usageError prints a message and the command's usage, and returns
// errUsage (exit status 2).
func usageError(fs *flag.FlagSet, stderr io.Writer, format string, a ...any) error {
	fmt.Fprintf(stderr, format+"\n", a...)
	fs.Usage()
	return errUsage
}
