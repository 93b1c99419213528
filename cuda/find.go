package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/qwenref/qwenref/internal/dl"
)

// What the prebuilt library needs on the machine that runs it. The kernels
// are compiled by nvcc 13.0 with the CUDA runtime linked in statically, so
// the only CUDA pieces looked up at run time are these two.
const (
	// DriverLibrary is the NVIDIA driver's CUDA library. CUDA 13.0 code
	// needs driver 580 or newer (MinDriver).
	DriverLibrary = "libcuda.so.1"
	// MinDriver is the oldest NVIDIA driver branch that runs CUDA 13.0 code.
	MinDriver = 580
	// CUBLASMajor is the cuBLAS major version the library links against
	// (libcublas.so.13, from CUDA 13.x or the nvidia-cublas 13 wheel that
	// PyTorch's cu130 builds install). Other majors have other sonames and
	// are not accepted.
	CUBLASMajor = 13
)

// LibraryName is the file name of the compiled kernels.
const LibraryName = "libqwenref_cuda.so"

// prepareLibrary loads the driver and cuBLAS into the process (so the
// kernel library's dependencies resolve to them) and returns the path of
// the kernel library: $QWENREF_CUDA_LIB, else LibraryName next to the
// executable, else the prebuilt copy embedded in this package.
func prepareLibrary() (string, error) {
	if _, err := dl.Open(DriverLibrary, dl.Now|dl.Global); err != nil {
		return "", fmt.Errorf("cuda: missing %s (the NVIDIA driver, %d or newer): looked in the system loader's path "+
			"(ldconfig, LD_LIBRARY_PATH=%q): %v", DriverLibrary, MinDriver, os.Getenv("LD_LIBRARY_PATH"), err)
	}
	if err := loadCUBLAS(); err != nil {
		return "", err
	}
	if p := os.Getenv("QWENREF_CUDA_LIB"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("cuda: QWENREF_CUDA_LIB=%s: %v", p, err)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), LibraryName)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return extractPrebuilt()
}

// loadCUBLAS opens libcublasLt and libcublas of CUBLASMajor with global
// scope: first by soname (LD_LIBRARY_PATH, the loader cache, the system
// directories), then from the usual toolkit directories and Python
// environments' nvidia/cublas/lib. It names every place it looked when
// none has them.
func loadCUBLAS() error {
	lt := fmt.Sprintf("libcublasLt.so.%d", CUBLASMajor)
	blas := fmt.Sprintf("libcublas.so.%d", CUBLASMajor)
	mode := dl.Now | dl.Global
	if _, err := dl.Open(lt, mode); err == nil {
		if _, err := dl.Open(blas, mode); err == nil {
			return nil
		}
	}
	dirs := cublasDirs()
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, blas)); err != nil {
			continue
		}
		if _, err := dl.Open(filepath.Join(d, lt), mode); err != nil {
			return fmt.Errorf("cuda: %s: %v", filepath.Join(d, lt), err)
		}
		if _, err := dl.Open(filepath.Join(d, blas), mode); err != nil {
			return fmt.Errorf("cuda: %s: %v", filepath.Join(d, blas), err)
		}
		return nil
	}
	return fmt.Errorf("cuda: missing %s (cuBLAS %d): looked in LD_LIBRARY_PATH (%q), the system loader's cache "+
		"and directories, and %s; install CUDA 13's cuBLAS, or the nvidia-cublas wheel (pip install nvidia-cublas), "+
		"or put its lib directory on LD_LIBRARY_PATH", blas, CUBLASMajor, os.Getenv("LD_LIBRARY_PATH"), strings.Join(dirs, ", "))
}

// cublasDirs lists the directories tried after the loader's own search:
// CUDA toolkit installs, then the nvidia wheels' lib directories of every
// Python environment found (the active virtualenv or conda env, those of
// each python3 on PATH, the system's and the user's site-packages, and
// /opt/*/ environments).
func cublasDirs() []string {
	arch := "x86_64-linux"
	if runtime.GOARCH == "arm64" {
		arch = "sbsa-linux"
	}
	dirs := []string{"/usr/local/cuda/lib64", "/usr/local/cuda/targets/" + arch + "/lib",
		fmt.Sprintf("/usr/local/cuda-%d/lib64", CUBLASMajor)}
	var prefixes []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := os.Getenv(v); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "python3")); err == nil {
			prefixes = append(prefixes, filepath.Dir(d))
		}
	}
	home, _ := os.UserHomeDir()
	prefixes = append(prefixes, "/usr", "/usr/local", filepath.Join(home, ".local"))
	if m, _ := filepath.Glob("/opt/*"); m != nil {
		prefixes = append(prefixes, m...)
	}
	if m, _ := filepath.Glob("/opt/*/.venv"); m != nil {
		prefixes = append(prefixes, m...)
	}
	seen := map[string]bool{}
	for _, p := range prefixes {
		sites, _ := filepath.Glob(filepath.Join(p, "lib", "python3*", "*-packages"))
		sort.Strings(sites)
		for _, s := range sites {
			for _, sub := range []string{"nvidia/cublas/lib", fmt.Sprintf("nvidia/cu%d/lib", CUBLASMajor)} {
				d := filepath.Join(s, sub)
				if !seen[d] {
					seen[d] = true
					if _, err := os.Stat(d); err == nil {
						dirs = append(dirs, d)
					}
				}
			}
		}
	}
	return dirs
}

// errNoPrebuilt is returned when this build carries no prebuilt kernels.
var errNoPrebuilt = errors.New("cuda: this build carries no prebuilt kernels (cuda/prebuilt is empty): build them with make -C cuda and set QWENREF_CUDA_LIB=$PWD/cuda/libqwenref_cuda.so")
