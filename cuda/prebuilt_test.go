package cuda

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// sourceFiles lists what `make -C cuda prebuilt` hashes: the Makefile and
// every .cu, .cuh and .h directly under csrc/ (not the lint stand-ins).
func sourceFiles(t *testing.T) []string {
	files := []string{"Makefile"}
	for _, pat := range []string{"csrc/*.cu", "csrc/*.cuh", "csrc/*.h"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	return files
}

// TestPrebuiltMatchesSources fails when the embedded kernels were built
// from other sources than the ones in the tree, so stale kernels cannot
// ship: every source must be listed in prebuilt/SOURCES with its sha256,
// and nothing listed may be gone.
func TestPrebuiltMatchesSources(t *testing.T) {
	info, err := PrebuiltInfo()
	if err != nil {
		t.Fatalf("%v (make -C cuda prebuilt on a machine with nvcc 13, then commit cuda/prebuilt)", err)
	}
	var stale []string
	seen := map[string]bool{}
	for _, f := range sourceFiles(t) {
		seen[f] = true
		sum, err := fileSHA256(f)
		if err != nil {
			t.Fatal(err)
		}
		switch want, ok := info.Sources[f]; {
		case !ok:
			stale = append(stale, f+" (new since the build)")
		case want != sum:
			stale = append(stale, f+" (changed since the build)")
		}
	}
	for f := range info.Sources {
		if !seen[f] {
			stale = append(stale, f+" (gone since the build)")
		}
	}
	if len(stale) > 0 {
		sort.Strings(stale)
		t.Fatalf("cuda/prebuilt/%s is stale: %s. Rebuild the kernels with make -C cuda prebuilt (nvcc 13) and commit cuda/prebuilt",
			LibraryName+".gz", strings.Join(stale, ", "))
	}
}

// TestPrebuiltArchive checks that the embedded archive unpacks to the
// library whose sha256 SOURCES records, and that SOURCES says how it was
// built.
func TestPrebuiltArchive(t *testing.T) {
	info, err := PrebuiltInfo()
	if err != nil {
		t.Fatal(err)
	}
	gz, err := prebuiltFS.ReadFile(prebuiltGz)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, zr)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != info.LibSHA256 {
		t.Fatalf("%s unpacks to sha256 %s, SOURCES says %s", prebuiltGz, got, info.LibSHA256)
	}
	notes := strings.Join(info.Notes, "\n")
	for _, want := range []string{"sm_80", "sm_90", "sm_100", "sm_120", "compute_80", "libcublas.so.13"} {
		if !strings.Contains(notes, want) {
			t.Errorf("SOURCES notes do not mention %s:\n%s", want, notes)
		}
	}
	t.Logf("prebuilt library: %d bytes (%d gzipped); %s", n, len(gz), notes)
}

func TestParseSourcesRejectsBadLines(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	for _, bad := range []string{
		"nothex  csrc/a.cu\n" + sum + "  " + LibraryName,
		sum + " csrc/a.cu\n" + sum + "  " + LibraryName, // one space
		sum + "  csrc/a.cu\n",                           // no library line
		sum + "  " + LibraryName + "\n",                 // no sources
	} {
		if _, err := parseSources([]byte(bad)); err == nil {
			t.Errorf("parseSources(%q) accepted", bad)
		}
	}
	p, err := parseSources([]byte("# note\n" + sum + "  " + LibraryName + "\n" + sum + "  csrc/a.cu\n"))
	if err != nil || p.LibSHA256 != sum || p.Sources["csrc/a.cu"] != sum || len(p.Notes) != 1 {
		t.Fatalf("parseSources: %+v, %v", p, err)
	}
}
