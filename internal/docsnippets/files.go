package docsnippets

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// FindRoot returns the nearest directory at or above dir that holds go.mod.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod at or above %s", dir)
		}
	}
}

// MarkdownFiles lists the repository's Markdown files, slash-separated and
// relative to root: the tracked ones (git ls-files) in a git checkout, else
// every *.md below root outside hidden directories (a copy without .git).
func MarkdownFiles(root string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(root, ".git")); err == nil {
		if _, err := exec.LookPath("git"); err == nil {
			cmd := exec.Command("git", "-C", root, "ls-files", "-z", "--", "*.md")
			out, err := cmd.Output()
			if err != nil {
				return nil, fmt.Errorf("git ls-files in %s: %v", root, err)
			}
			var files []string
			for _, f := range strings.Split(string(out), "\x00") {
				if f == "" {
					continue
				}
				// A file deleted in the work tree but still in the index is not a doc.
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(f))); err == nil {
					files = append(files, f)
				}
			}
			sort.Strings(files)
			return files, nil
		}
	}
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") && d.Type().IsRegular() {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// maxDocBytes bounds the size of a Markdown file the parser reads.
const maxDocBytes = 16 << 20

// Load parses every Markdown file of the repository at root and returns
// their blocks in file order, with one error per malformed fence line.
func Load(root string) (blocks []Block, problems []error, err error) {
	files, err := MarkdownFiles(root)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range files {
		path := filepath.Join(root, filepath.FromSlash(f))
		info, err := os.Stat(path)
		if err != nil {
			return nil, nil, err
		}
		if info.Size() > maxDocBytes {
			return nil, nil, fmt.Errorf("%s: %d bytes, over the %d a Markdown file may have", f, info.Size(), maxDocBytes)
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		bs, err := ParseFile(f, src)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		for _, b := range bs {
			if err := b.Check(); err != nil {
				problems = append(problems, err)
			}
		}
		blocks = append(blocks, bs...)
	}
	if len(files) == 0 {
		return nil, nil, errors.New("no Markdown files found under " + root)
	}
	return blocks, problems, nil
}
