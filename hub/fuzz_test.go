package hub

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/qwenref/qwenref/internal/safeio"
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

// FuzzParseListing: any answer to the listing request either is refused
// or yields files that stay inside the folder they are written to, name
// no git directory and none of the local dir's own records, carry no
// control characters, appear once, and have sane sizes and hashes.
func FuzzParseListing(f *testing.F) {
	sib := func(name string) string {
		return `{"rfilename": ` + strconv.Quote(name) + `, "size": 2, "blobId": "` + strings.Repeat("a", 40) + `"}`
	}
	lfs := `{"rfilename": "model.safetensors", "size": 134, "blobId": "` + strings.Repeat("b", 40) +
		`", "lfs": {"sha256": "` + strings.Repeat("c", 64) + `", "size": 1000, "pointerSize": 134}}`
	head := `{"id": "org/x", "sha": "` + strings.Repeat("d", 40) + `", "siblings": [`
	for _, s := range []string{
		head + sib("config.json") + ", " + lfs + "]}",
		head + sib(".git/config") + "]}",
		head + sib("a/.GIT/hooks/x") + "]}",
		head + sib(".cache/huggingface/download/x.metadata") + "]}",
		head + sib("x\u001b[2J\r\n") + "]}",
		head + sib("../x") + ", " + sib("/abs") + "]}",
		head + sib("a") + ", " + sib("a") + "]}",
		head + `{"rfilename": "x", "size": -1, "blobId": "` + strings.Repeat("a", 40) + `"}]}`,
		`{"sha": 5}`, `[]`, `{"siblings": null}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<20 {
			return // bounded work per input; the real cap (64 MiB) is checked before parsing
		}
		info, err := parseListing(data, "org/x", "main", "http://hub/api")
		if err != nil {
			noControlsIn(t, err.Error())
			return
		}
		if len(info.Commit) != 40 {
			t.Fatalf("commit %q accepted", info.Commit)
		}
		seen := map[string]bool{}
		for _, file := range info.Files {
			p := file.Path
			local := filepath.FromSlash(p)
			if !filepath.IsLocal(local) || strings.ContainsAny(p, `\`) || seen[p] {
				t.Fatalf("name %q accepted: not local, a backslash, or listed twice", p)
			}
			seen[p] = true
			parts := strings.Split(strings.ToLower(p), "/")
			for _, part := range parts {
				if strings.TrimRight(part, ". ") == ".git" {
					t.Fatalf("name %q with a git directory accepted", p)
				}
			}
			if len(parts) > 1 && parts[0] == ".cache" && parts[1] == "huggingface" {
				t.Fatalf("name %q under .cache/huggingface accepted", p)
			}
			if safeio.Clean(p) != p && len(p) <= 200 {
				t.Fatalf("name %q with characters to escape accepted", p)
			}
			if file.Size < 0 || file.Size > maxFileSize || (len(file.ETag()) != 40 && len(file.ETag()) != 64) {
				t.Fatalf("file %+v accepted", file)
			}
		}
	})
}

// noControlsIn fails if a message holds a raw control character.
func noControlsIn(t *testing.T, msg string) {
	t.Helper()
	for _, r := range msg {
		if r < 0x20 || r == 0x7f {
			t.Fatalf("message with a raw control character: %q", msg)
		}
	}
}
