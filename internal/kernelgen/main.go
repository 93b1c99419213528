// Command kernelgen writes the generated assembly and Go of the kernel
// packages, every architecture's on any host. Each package's //go:generate
// line runs it in the package's directory with the package's path:
//
//	go run github.com/qwenref/qwenref/internal/kernelgen layers/conv1d
//
// The generators are the packages beneath this one, one per kernel package
// and instruction set. Every file is written through a temporary file and a
// rename, so an interrupted run leaves the old one whole.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	attentionarm "github.com/qwenref/qwenref/internal/kernelgen/attention/arm"
	attentionx86 "github.com/qwenref/qwenref/internal/kernelgen/attention/x86"
	conv1darm "github.com/qwenref/qwenref/internal/kernelgen/conv1d/arm"
	conv1dx86 "github.com/qwenref/qwenref/internal/kernelgen/conv1d/x86"
	gateddeltaarm "github.com/qwenref/qwenref/internal/kernelgen/gateddelta/arm"
	gateddeltax86 "github.com/qwenref/qwenref/internal/kernelgen/gateddelta/x86"
	"github.com/qwenref/qwenref/internal/kernelgen/linalg/amx"
	linalgarm "github.com/qwenref/qwenref/internal/kernelgen/linalg/arm"
	"github.com/qwenref/qwenref/internal/kernelgen/linalg/portable"
	linalgx86 "github.com/qwenref/qwenref/internal/kernelgen/linalg/x86"
	vecmatharm "github.com/qwenref/qwenref/internal/kernelgen/vecmath/arm"
	vecmathx86 "github.com/qwenref/qwenref/internal/kernelgen/vecmath/x86"
	"github.com/qwenref/qwenref/internal/safeio"
)

// generator returns the files one generator writes, by name.
type generator func() (map[string][]byte, error)

// generators lists each kernel package's generators, by the package's path
// in the module.
var generators = map[string][]generator{
	"internal/vecmath":  {vecmathx86.Files, vecmatharm.Files},
	"layers/conv1d":     {conv1dx86.Files, conv1darm.Files},
	"layers/attention":  {attentionx86.Files, attentionarm.Files},
	"layers/gateddelta": {gateddeltax86.Files, gateddeltaarm.Files},
	"linalg":            {portable.Files, linalgarm.Files, linalgx86.Files, amx.Files},
}

func main() {
	wd, err := os.Getwd()
	if err == nil {
		err = run(os.Args[1:], wd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kernelgen:", err)
		os.Exit(1)
	}
}

// run writes the files of the package named by args into dir, which must
// be that package's directory.
func run(args []string, dir string) error {
	if len(args) != 1 {
		return fmt.Errorf("want one argument, the package's path (one of %s), got %d", known(), len(args))
	}
	pkg := args[0]
	if _, ok := generators[pkg]; !ok {
		return fmt.Errorf("no generators for %s (known: %s)", safeio.Quote(pkg), known())
	}
	if filepath.ToSlash(dir) != pkg && !strings.HasSuffix(filepath.ToSlash(dir), "/"+pkg) {
		return fmt.Errorf("%s is not %s's directory: run it there (go generate does)", safeio.Quote(dir), pkg)
	}
	files, err := generate(pkg)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		b := files[name]
		err := safeio.WriteFile(filepath.Join(dir, name), func(w io.Writer) error { _, err := w.Write(b); return err },
			safeio.WriteOptions{})
		if err != nil {
			return err
		}
	}
	return nil
}

// generate runs pkg's generators and returns their files, by name.
func generate(pkg string) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, g := range generators[pkg] {
		out, err := g()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pkg, err)
		}
		for name, b := range out {
			if _, dup := files[name]; dup {
				return nil, fmt.Errorf("%s: two generators write %s", pkg, name)
			}
			files[name] = b
		}
	}
	return files, nil
}

// known lists the packages kernelgen writes.
func known() string {
	var ps []string
	for p := range generators {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return strings.Join(ps, ", ")
}
