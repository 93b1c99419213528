//go:build unix

package safeio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// OpenNoFollow refuses a link (even a dangling one, which O_CREATE would
// otherwise create a file through), a FIFO without blocking, and a
// directory; it opens or creates a regular file; Links counts hard links.
func TestOpenNoFollow(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "precious")
	write(t, outside, "precious")
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	for _, l := range [][2]string{{outside, "link"}, {filepath.Join(t.TempDir(), "absent"), "dangling"}} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"link": "symbolic link", "dangling": "symbolic link", "fifo": "FIFO", ".": "directory"} {
		p := filepath.Join(dir, name)
		done := make(chan error, 1)
		go func() { _, _, err := OpenNoFollow(p, os.O_RDWR|os.O_CREATE, 0o644); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s: got %v, want an error naming it and %q", name, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: OpenNoFollow blocked", name)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(outside), "absent")); err == nil {
		t.Fatal("a file was created through the dangling link")
	}
	if b, _ := os.ReadFile(outside); string(b) != "precious" {
		t.Fatalf("the linked file changed: %q", b)
	}
	p := filepath.Join(dir, "new")
	f, st, err := OpenNoFollow(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("new file: %v %v", st, err)
	}
	if _, err := f.WriteString("x"); err != nil { // blocking writes again
		t.Fatal(err)
	}
	f.Close()
	if Links(st) != 1 {
		t.Fatalf("Links = %d, want 1", Links(st))
	}
	if err := os.Link(p, filepath.Join(dir, "second")); err != nil {
		t.Fatal(err)
	}
	st, _ = os.Stat(p)
	if Links(st) != 2 {
		t.Fatalf("Links = %d, want 2", Links(st))
	}
}
