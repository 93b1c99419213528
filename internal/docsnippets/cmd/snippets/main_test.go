package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// repo writes a fake repository root with the given README.md.
func repo(t *testing.T, readme string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range map[string]string{"go.mod": "module x\n", "README.md": readme} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestUntaggedBlockFails(t *testing.T) {
	root := repo(t, "# x\n\n```sh\necho hi\n```\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-list", "-root", root}, &stdout, &stderr); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "README.md:3: untagged sh block") {
		t.Errorf("stderr %q does not name README.md:3", stderr.String())
	}
}

func TestUsageErrors(t *testing.T) {
	root := repo(t, "```sh run-cpu\ntrue\n```\n")
	for _, args := range [][]string{{"-root", root}, {"-root", root, "-tag", "not-run"}, {"-root", root, "-tag", "run-cpu", "extra"}, {"-run", "(", "-tag", "run-cpu"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", args, code, stderr.String())
		}
	}
}

func TestRunsTaggedBlocks(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("shell blocks need bash")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not on PATH")
	}
	readme := "```sh run-cpu\nqwenref | grep -q stand-in\n```\n\n```sh run-gpu\nexit 1\n```\n\n```sh not-run: never\nexit 1\n```\n"
	root := repo(t, readme)
	fake := filepath.Join(t.TempDir(), "qwenref")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho stand-in\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-root", root, "-tag", "run-cpu", "-qwenref", fake}, &stdout, &stderr); code != 0 {
		t.Fatalf("run-cpu: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "PASS  README.md:1") || !strings.Contains(stdout.String(), "1 passed, 0 failed") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	stdout.Reset()
	if code := run([]string{"-root", root, "-tag", "run-gpu", "-qwenref", fake}, &stdout, &stderr); code != 1 {
		t.Errorf("run-gpu: exit %d, want 1 (the GPU block fails)\n%s", code, stdout.String())
	}
	if !strings.Contains(stdout.String(), "PASS  README.md:1  sh run-cpu, setup") || !strings.Contains(stdout.String(), "FAIL  README.md:5") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	stdout.Reset()
	if code := run([]string{"-root", root, "-tag", "run-gpu", "-run", "nothing-matches", "-qwenref", fake}, &stdout, &stderr); code != 0 {
		t.Errorf("-run matching nothing: exit %d", code)
	}
}
