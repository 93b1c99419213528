package dl

import (
	"runtime"
	"strings"
	"testing"
)

func TestOpenMissingLibraryIsAnError(t *testing.T) {
	_, err := Open("/nonexistent/libqwenref-no-such.so", Now|Local)
	if err == nil {
		t.Fatal("opening a missing library succeeded")
	}
	if runtime.GOOS == "windows" && !strings.Contains(err.Error(), "cannot be loaded") {
		t.Fatalf("error %q does not say why", err)
	}
}

func TestOpenAndSymOnLibc(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("libc's name is Linux-specific")
	}
	h, err := Open("libc.so.6", Now|Local)
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	if _, err := Sym(h, "strlen"); err != nil {
		t.Fatal(err)
	}
	if _, err := Sym(h, "qwenref_no_such_symbol"); err == nil {
		t.Fatal("a missing symbol was found")
	}
}
