package dl

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
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

// Concurrent failed opens each get their own library's reason: dlerror is
// per thread, so an open moved between threads got an empty or foreign one.
func TestOpenErrorsNameTheirLibrary(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no dlopen")
	}
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				name := fmt.Sprintf("/nonexistent/libqwenref-missing-%d-%d.so", g, i)
				_, err := Open(name, Now|Local)
				if err == nil || !strings.Contains(err.Error(), name) {
					errs <- fmt.Sprintf("open %s: %v", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
