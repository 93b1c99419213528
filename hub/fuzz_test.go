package hub

import (
	"strings"
	"testing"
)

// FuzzMatcher: any pattern either compiles or is refused; matching never
// panics.
func FuzzMatcher(f *testing.F) {
	for _, s := range []string{"*.json", "[", "[]", "[!]", "[z-a]", "sub/", "a[!b-c]?*", `\`, "[^x]"} {
		f.Add(s, "sub/model.safetensors")
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		m, err := NewMatcher([]string{pattern})
		if err != nil {
			return
		}
		m.Match(name)
		if !strings.ContainsAny(pattern, "*?[") && !strings.HasSuffix(pattern, "/") && !m.Match(pattern) {
			t.Fatalf("literal pattern %q does not match itself", pattern)
		}
	})
}

// FuzzParseRef: an accepted reference never escapes the cache (no "..",
// no absolute revision).
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"Qwen/Qwen3.5-0.8B", "a/b@refs/pr/1", "a/b@../x", "../a/b", "a/b@", "a--b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		repo, rev, err := ParseRef(ref)
		if err != nil {
			return
		}
		for _, p := range append(strings.Split(repo, "/"), strings.Split(rev, "/")...) {
			if p == ".." || p == "." || p == "" {
				t.Fatalf("ParseRef(%q) accepted %q @ %q", ref, repo, rev)
			}
		}
	})
}
