package main

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The CLI only parses flags, calls the library and prints: its logic
// lives in packages named for what they do. These caps keep it so.
const (
	maxCLILines   = 3700 // non-test .go lines, with those of packages only the CLI uses (3,200 before features and serve, which may add 300 each)
	maxCLIImports = 15   // distinct packages of the module its non-test files import (12 before generate split from model and features came, 14 before serve)
	maxCLIFile    = 300  // lines of one non-test file
)

func TestCLIShape(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	lines, imports := 0, map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		n := bytes.Count(data, []byte("\n"))
		lines += n
		if n > maxCLIFile {
			t.Errorf("%s has %d lines, over %d: move its logic into the package it belongs to", f, n, maxCLIFile)
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, data, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range parsed.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, mod) {
				imports[p] = true
			}
		}
	}
	for pkg, n := range cliOnlyPackages(t, imports) {
		t.Logf("%s is imported by the CLI alone: its %d lines count as the CLI's", pkg, n)
		lines += n
	}
	t.Logf("cmd/qwenref: %d lines, %d project imports", lines, len(imports))
	if lines > maxCLILines {
		t.Errorf("cmd/qwenref has %d lines, over %d: logic belongs in the library", lines, maxCLILines)
	}
	if len(imports) > maxCLIImports {
		t.Errorf("cmd/qwenref imports %d packages of the module, over %d: %v", len(imports), maxCLIImports, keys(imports))
	}
}

const mod = "github.com/qwenref/qwenref/"

// cliOnlyPackages returns the non-test line counts of the packages under
// internal/ or cmd/ that the CLI imports and no other package of the
// module does: code moved out of the CLI into a package of its own is
// still the CLI's.
func cliOnlyPackages(t *testing.T, cliImports map[string]bool) map[string]int {
	out, err := exec.Command("go", "list", "-json", mod+"...").Output()
	require.NoError(t, err, "go list")
	importedBy := map[string]int{}
	dirs := map[string]struct {
		dir   string
		files []string
	}{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p struct {
			ImportPath, Dir string
			GoFiles         []string
			Imports         []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		dirs[p.ImportPath] = struct {
			dir   string
			files []string
		}{p.Dir, p.GoFiles}
		for _, imp := range p.Imports {
			if p.ImportPath != mod+"cmd/qwenref" {
				importedBy[imp]++
			}
		}
	}
	require.Greater(t, len(dirs), 10, "go list found too few packages")
	counts := map[string]int{}
	for pkg := range cliImports {
		rel := strings.TrimPrefix(pkg, mod)
		if importedBy[pkg] > 0 || !strings.HasPrefix(rel, "internal/") && !strings.HasPrefix(rel, "cmd/") {
			continue
		}
		for _, f := range dirs[pkg].files {
			data, err := os.ReadFile(filepath.Join(dirs[pkg].dir, f))
			require.NoError(t, err)
			counts[rel] += bytes.Count(data, []byte("\n"))
		}
	}
	return counts
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, strings.TrimPrefix(k, mod))
	}
	return out
}
