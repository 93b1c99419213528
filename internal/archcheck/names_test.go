package archcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sourceFiles lists the module's hand-written non-test Go files.
func sourceFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != "../.." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("found only %d Go files", len(files))
	}
	return files
}

// TestCheckpointNamesWrittenOnce holds every checkpoint tensor name to the
// place its weight is declared: the names are the leaf `tensor` tags of
// the weight structs, and each may appear at most three times in all
// hand-written and generated non-test Go, comments and strings included;
// the stems of the GDN input projections at most four times.
func TestCheckpointNamesWrittenOnce(t *testing.T) {
	files := sourceFiles(t)
	src := map[string]string{}
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		src[p] = string(data)
		f, err := parser.ParseFile(fset, p, data, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			st, ok := n.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fld := range st.Fields.List {
				if fld.Tag == nil {
					continue
				}
				tag, err := strconv.Unquote(fld.Tag.Value)
				if err != nil {
					t.Fatal(err)
				}
				name, ok := reflect.StructTag(tag).Lookup("tensor")
				if ok && reflect.StructTag(tag).Get("shape") != "" {
					names[name] = true
				}
			}
			return true
		})
	}
	if len(names) < 25 {
		t.Fatalf("found only %d tagged tensor names: %v", len(names), names)
	}
	count := func(word string) (n int, where []string) {
		// A name counts where it stands alone, not inside a longer name
		// (gate_proj.weight inside shared_expert.gate_proj.weight).
		re := regexp.MustCompile(`(^|[^A-Za-z0-9_.])` + regexp.QuoteMeta(word) + `($|[^A-Za-z0-9_])`)
		for p, s := range src {
			if k := len(re.FindAllStringIndex(s, -1)); k > 0 {
				n += k
				where = append(where, p)
			}
		}
		return n, where
	}
	for name := range names {
		if n, where := count(name); n > 3 {
			t.Errorf("checkpoint name %s is written %d times in non-test Go, over 3: %v", name, n, where)
		}
	}
	// The GDN input projections' fused and separate forms share a stem.
	for _, stem := range []string{"in_proj_qkv", "in_proj_qkvz"} {
		if n, where := count(stem); n > 4 {
			t.Errorf("%s is written %d times in non-test Go, over 4: %v", stem, n, where)
		}
	}
}
