// Package archcheck holds one test: the import arrows docs/architecture.md
// forbids do not appear in the module.
package archcheck

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/qwenref/qwenref/"

// forbidden maps a package prefix to the prefixes it must never import,
// directly or not (the test walks every transitive import).
var forbidden = map[string][]string{
	"layers/":   {"model", "bench", "cmd/", "cuda", "weights"},
	"linalg":    {"layers/", "model", "bench", "cmd/"},
	"weights":   {"layers/", "linalg", "model", "bench", "cmd/"},
	"tensor":    {"layers/", "linalg", "model", "weights", "bench", "cmd/"},
	"internal/": {"layers/", "linalg", "model", "weights", "bench", "cmd/"},
	"model":     {"bench", "cmd/", "reference"},
	"reference": {"model", "bench", "cmd/"},
	"tokenizer": {"model", "layers/", "bench", "cmd/"},
	"bench":     {"cmd/"},
	"hub":       {"model", "bench", "cmd/", "layers/", "linalg", "weights"}, // model imports hub (ResolveModel)
}

func TestForbiddenImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps=false", "-json", mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	deps := map[string][]string{}
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		deps[strings.TrimPrefix(p.ImportPath, mod)] = p.Imports
	}
	if len(deps) < 10 {
		t.Fatalf("go list found only %d packages", len(deps))
	}
	// closure returns every module package pkg reaches.
	var closure func(pkg string, seen map[string]bool)
	closure = func(pkg string, seen map[string]bool) {
		for _, imp := range deps[pkg] {
			if rel, ok := strings.CutPrefix(imp, mod); ok && !seen[rel] {
				seen[rel] = true
				closure(rel, seen)
			}
		}
	}
	// The walk must see real edges, or the test below proves nothing.
	sanity := map[string]bool{}
	closure("cmd/qwenref", sanity)
	for _, want := range []string{"model", "layers/gateddelta", "linalg", "weights", "tensor"} {
		if !sanity[want] {
			t.Fatalf("cmd/qwenref does not reach %s: the import walk is broken", want)
		}
	}
	for pkg := range deps {
		seen := map[string]bool{}
		closure(pkg, seen)
		for from, bans := range forbidden {
			if !hasPrefix(pkg, from) {
				continue
			}
			for imp := range seen {
				for _, ban := range bans {
					if hasPrefix(imp, ban) {
						t.Errorf("%s imports %s (directly or not): docs/architecture.md forbids %s → %s", pkg, imp, from, ban)
					}
				}
			}
		}
	}
}

// hasPrefix matches a package path against "dir/" (anything below) or an
// exact package name.
func hasPrefix(pkg, p string) bool {
	if strings.HasSuffix(p, "/") {
		return strings.HasPrefix(pkg, p)
	}
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}
