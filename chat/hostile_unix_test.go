//go:build unix

package chat

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A FIFO in place of a template file is refused at once, never read
// (reading it would block until someone writes).
func TestLoadRefusesFIFO(t *testing.T) {
	for _, name := range []string{"chat_template.jinja", "tokenizer_config.json", "chat_template.json"} {
		dir := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(dir, name), 0o600); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		done := make(chan error, 1)
		go func() { _, err := Load(dir); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("%s as a FIFO: no error", name)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s as a FIFO: Load blocked", name)
		}
		_ = os.Remove(filepath.Join(dir, name))
	}
}
