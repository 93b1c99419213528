package cuda

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The kernels ship prebuilt: `make -C cuda prebuilt` (on a machine with
// nvcc) compiles csrc/ for sm_80, sm_90a, sm_100 and sm_120 plus compute_80 PTX,
// strips and gzips the library into prebuilt/, and writes prebuilt/SOURCES:
// the sha256 of the library and of every source it was built from. A test
// (TestPrebuiltMatchesSources) fails when a source no longer matches, so
// stale kernels cannot ship.
//
//go:embed prebuilt
var prebuiltFS embed.FS

const (
	prebuiltGz      = "prebuilt/" + LibraryName + ".gz"
	prebuiltSources = "prebuilt/SOURCES"
)

// Prebuilt describes the embedded library: the sha256 of the (unzipped)
// library, the comment lines of SOURCES (how it was built), and the sha256
// recorded for each source file, keyed by its path under cuda/.
type Prebuilt struct {
	LibSHA256 string
	Notes     []string
	Sources   map[string]string
}

// PrebuiltInfo parses prebuilt/SOURCES. It fails when the build carries no
// prebuilt library.
func PrebuiltInfo() (*Prebuilt, error) {
	b, err := prebuiltFS.ReadFile(prebuiltSources)
	if err != nil {
		return nil, errNoPrebuilt
	}
	return parseSources(b)
}

// parseSources reads SOURCES: '#' comment lines, then sha256sum lines
// ("<hex>  <path>"); the line for LibraryName is the library's own hash.
func parseSources(b []byte) (*Prebuilt, error) {
	p := &Prebuilt{Sources: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			p.Notes = append(p.Notes, strings.TrimSpace(strings.TrimPrefix(line, "#")))
			continue
		}
		sum, path, ok := strings.Cut(line, "  ")
		if _, err := hex.DecodeString(sum); !ok || err != nil || len(sum) != 64 || path == "" {
			return nil, fmt.Errorf("cuda: %s line %d is not '<sha256>  <path>': %q", prebuiltSources, n, line)
		}
		if path == LibraryName {
			p.LibSHA256 = sum
		} else {
			p.Sources[path] = sum
		}
	}
	if p.LibSHA256 == "" || len(p.Sources) == 0 {
		return nil, fmt.Errorf("cuda: %s names no library hash or no sources", prebuiltSources)
	}
	return p, nil
}

// extractPrebuilt writes the embedded library (once per version) into the
// user's cache directory and returns its path: dlopen needs a file.
func extractPrebuilt() (string, error) {
	info, err := PrebuiltInfo()
	if err != nil {
		return "", err
	}
	gz, err := prebuiltFS.ReadFile(prebuiltGz)
	if err != nil {
		return "", errNoPrebuilt
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "qwenref", "cuda-"+info.LibSHA256[:16])
	path := filepath.Join(dir, LibraryName)
	if sum, err := fileSHA256(path); err == nil && sum == info.LibSHA256 {
		return path, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return "", fmt.Errorf("cuda: embedded %s: %v", prebuiltGz, err)
	}
	const maxLib = 512 << 20 // far above any real build; bounds a corrupt archive
	so, err := io.ReadAll(io.LimitReader(zr, maxLib))
	if err != nil {
		return "", fmt.Errorf("cuda: embedded %s: %v", prebuiltGz, err)
	}
	if sum := sha256.Sum256(so); hex.EncodeToString(sum[:]) != info.LibSHA256 {
		return "", fmt.Errorf("cuda: embedded %s does not match the sha256 in %s", prebuiltGz, prebuiltSources)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cuda: cache for the prebuilt kernels: %v", err)
	}
	tmp, err := os.CreateTemp(dir, LibraryName+".*")
	if err != nil {
		return "", fmt.Errorf("cuda: cache for the prebuilt kernels: %v", err)
	}
	_, werr := tmp.Write(so)
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o755)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("cuda: writing %s: %v", path, werr)
	}
	return path, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
