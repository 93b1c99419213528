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
	"layers/":   {"model", "bench", "cmd/", "cuda", "weights", "verify"},
	"linalg":    {"layers/", "model", "bench", "cmd/", "verify"},
	"weights":   {"layers/", "linalg", "model", "bench", "cmd/", "verify"},
	"tensor":    {"layers/", "linalg", "model", "weights", "bench", "cmd/", "verify"},
	"internal/": {"layers/", "linalg", "model", "weights", "bench", "cmd/", "verify"},
	// model is the engine: the application (generate) and what only it
	// needs (chat templates, tokenizers, sampling) sit above it.
	"model":    {"bench", "cmd/", "reference", "cuda", "verify", "generate", "chat", "tokenizer", "sampling", "features", "serve"},
	"generate": {"bench", "cmd/", "verify", "cuda", "reference", "features", "serve"},
	"sampling": {"model", "generate", "layers/", "linalg", "weights", "bench", "cmd/", "verify"},
	// The GDN and attention mixers are siblings: neither builds on the other.
	"layers/gateddelta": {"layers/attention"},
	"layers/attention":  {"layers/gateddelta"},
	"reference":         {"model", "bench", "cmd/", "verify"},
	"tokenizer":         {"model", "generate", "layers/", "bench", "cmd/", "verify"},
	"bench":             {"cmd/", "verify"},
	"cuda":              {"verify"},
	"verify":            {"bench", "cmd/", "cuda"},
	"hub":               {"model", "bench", "cmd/", "layers/", "linalg", "weights", "verify"}, // model imports hub (ResolveModel)
	"chat":              {"model", "generate", "bench", "cmd/", "layers/", "linalg", "weights", "verify"},
	// features runs a model through model's public API on whatever backend
	// its caller opened: no kernels, devices or demo of its own.
	"features": {"bench", "cmd/", "cuda", "verify", "bundled"},
	// serve runs the engine through generate and model on the backend
	// its caller opened; only the CLI imports it.
	"serve": {"bench", "cmd/", "cuda", "verify", "reference", "features", "bundled"},
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
	for _, want := range []string{"model", "generate", "layers/gateddelta", "linalg", "weights", "tensor", "verify"} {
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

// directOnly limits what a package may import directly (not counting what
// its imports reach): bench runs the model's own code and reaches a layer
// package only for the kernel-only ops' dims (the GDN core's, the conv's).
var directOnly = map[string]struct{ banned, except []string }{
	"bench": {banned: []string{"layers/", "linalg", "weights"}, except: []string{"layers/gateddelta", "layers/conv1d"}},
}

func TestDirectImports(t *testing.T) {
	for pkg, rule := range directOnly {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		imports := strings.Fields(string(out))
		if len(imports) == 0 {
			t.Fatalf("go list found no imports of %s", pkg)
		}
	next:
		for _, imp := range imports {
			rel, ok := strings.CutPrefix(imp, mod)
			if !ok {
				continue
			}
			for _, e := range rule.except {
				if rel == e {
					continue next
				}
			}
			for _, ban := range rule.banned {
				if hasPrefix(rel, ban) {
					t.Errorf("%s imports %s directly: docs/architecture.md allows it only %v of %v", pkg, rel, rule.except, rule.banned)
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
