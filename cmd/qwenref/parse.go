package main

// Flag sets: what every command's flags share (the help's layout, short
// spellings, --threads) and the one-line usage errors.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
)

// newFlags makes a FlagSet whose -h output teaches: a synopsis, a longer
// description, then the flags. Every command gets --threads.
func newFlags(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: qwenref %s %s\n\n%s\n\nFlags:\n", name, synopsis, strings.TrimSpace(about))
		fs.PrintDefaults()
	}
	fs.Int("threads", 0, "CPU threads to use (sets GOMAXPROCS; 0 = all cores, or $GOMAXPROCS)")
	return fs
}

// helpOut is where -h prints a command's help: the stdout of the running
// command (Main sets it), as help is output asked for.
var helpOut io.Writer

// shortFlags are one-letter spellings of the common flags, as llama.cpp's
// tools have them, on every command that has the long one.
var shortFlags = map[string]string{"m": "model", "p": "prompt", "n": "max-new-tokens", "t": "threads"}

// parseFlags parses, applies --threads, and turns a bad flag into a short
// usage error (exit status 2); -h prints the full help on stdout.
func parseFlags(fs *flag.FlagSet, args []string) error {
	addShortFlags(fs)
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		if helpOut != nil {
			fs.SetOutput(helpOut)
		}
		fs.Usage()
		fs.SetOutput(out)
		return err
	}
	if err != nil {
		return usageError(fs, out, "%v", err)
	}
	if fs.NArg() > 0 {
		return usageError(fs, out, "unexpected argument %q", fs.Arg(0))
	}
	if f := fs.Lookup("threads"); f != nil {
		n, _ := f.Value.(flag.Getter).Get().(int)
		hi := maxThreads()
		if n < 0 || n > hi {
			return usageError(fs, out, "--threads must be 0 to %d, got %d", hi, n)
		}
		if n > 0 {
			runtime.GOMAXPROCS(n)
		} else if procs := runtime.GOMAXPROCS(0); procs > hi {
			// $GOMAXPROCS, which the runtime read at start: held to the same cap.
			runtime.GOMAXPROCS(hi)
			fmt.Fprintf(out, "qwenref %s: GOMAXPROCS %d from the environment is more than %d; using %d threads\n", fs.Name(), procs, hi, hi)
		}
	}
	if err := applyGPUFlag(fs); err != nil {
		return usageError(fs, out, "%v", err)
	}
	return nil
}

// addShortFlags registers shortFlags on fs, once.
func addShortFlags(fs *flag.FlagSet) {
	for short, long := range shortFlags {
		if f := fs.Lookup(long); f != nil && fs.Lookup(short) == nil {
			fs.Var(f.Value, short, "short for --"+long)
		}
	}
}

// parseWithPositional is parseFlags for a command that takes one
// positional argument, with flags before and after it (`download org/name
// --revision R` as well as the reverse, `check --backend B FILE`); a flag
// error, -h or a second positional is reported as parseFlags reports it.
func parseWithPositional(fs *flag.FlagSet, args []string) (string, error) {
	addShortFlags(fs)
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args) // stops at the positional
	fs.SetOutput(out)
	if err != nil {
		return "", parseFlags(fs, args) // again, to report it (one line, or the help on stdout)
	}
	if fs.NArg() == 0 {
		return "", parseFlags(fs, nil)
	}
	pos := fs.Arg(0)
	return pos, parseFlags(fs, fs.Args()[1:])
}

// maxThreads caps --threads: the runtime takes GOMAXPROCS as an int32 (a
// larger value crashes it) and builds per-thread state for each, so 10⁶
// threads would take tens of GB before any work. No machine has more cores
// than 4096, or than NumCPU where it does.
func maxThreads() int { return max(4096, runtime.NumCPU()) }

// usageError prints one line naming the problem and where the help is, and
// returns errUsage (exit status 2).
func usageError(fs *flag.FlagSet, stderr io.Writer, format string, a ...any) error {
	fmt.Fprintf(stderr, "qwenref %s: %s; see 'qwenref help %s'\n", fs.Name(), fmt.Sprintf(format, a...), fs.Name())
	return errUsage
}

// flagWasSet reports whether the command line set the named flag, under
// its name or its short one.
func flagWasSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name || shortFlags[f.Name] == name })
	return set
}
