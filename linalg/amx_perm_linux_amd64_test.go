package linalg

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xcpu "golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/tensor"
)

// permChildEnv marks the child process of TestAMXPermissionRefused.
const permChildEnv = "QWENREF_TEST_AMX_PERMISSION_CHILD"

// TestAMXPermissionRefused makes Linux refuse the tile state for real: in
// a child process (the permission, once granted, lasts the process) one
// thread holds a 6 KiB signal stack, room for the AVX-512 state but not
// for the tiles' 8 KiB more, when the first bf16 product asks for it, so
// arch_prctl fails with ENOSPC. Then the bf16 kernel must fall back to
// VDPBF16PS (or widen) and say why, the fallback product must be right,
// and BlockedAMX must return the reason rather than run a tile
// instruction, which would die of SIGILL.
func TestAMXPermissionRefused(t *testing.T) {
	if os.Getenv(permChildEnv) == "1" {
		permissionRefusedChild(t)
		return
	}
	if cpu.Selected() != cpu.AVX512 || !xcpu.X86.HasAMXTile || !xcpu.X86.HasAMXBF16 {
		t.Skip("no AMX-BF16 at this CPU or level: nothing to refuse")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAMXPermissionRefused$", "-test.v", "-test.count=1")
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, cpu.BF16EnvVar+"=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, permChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	require.NoError(t, err)
	require.Contains(t, string(out), "--- PASS: TestAMXPermissionRefused")
	require.NotContains(t, string(out), "--- SKIP")
}

func permissionRefusedChild(t *testing.T) {
	// The small signal stack goes on this thread only, with every signal
	// blocked on it meanwhile, so that none is delivered onto it.
	runtime.LockOSThread()
	var all, oldMask unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	require.NoError(t, unix.PthreadSigmask(unix.SIG_SETMASK, &all, &oldMask))
	small := make([]byte, 6<<10)
	type stackT struct {
		sp    uintptr
		flags int32
		size  uintptr
	}
	ss, goStack := stackT{sp: uintptr(unsafe.Pointer(&small[0])), size: uintptr(len(small))}, stackT{}
	_, _, e := unix.Syscall(unix.SYS_SIGALTSTACK, uintptr(unsafe.Pointer(&ss)), uintptr(unsafe.Pointer(&goStack)), 0)
	var kernel string
	if e == 0 {
		kernel = BF16Kernel() // the first ask for the tile state
		_, _, e2 := unix.Syscall(unix.SYS_SIGALTSTACK, uintptr(unsafe.Pointer(&goStack)), 0, 0)
		require.Zero(t, e2, "restoring the Go signal stack")
	}
	runtime.KeepAlive(small)
	require.NoError(t, unix.PthreadSigmask(unix.SIG_SETMASK, &oldMask, nil))
	runtime.UnlockOSThread()
	require.Zero(t, e, "sigaltstack with a 6 KiB stack")

	err := cpu.AMX()
	require.Error(t, err, "the tile state was granted despite the small signal stack")
	assert.Contains(t, err.Error(), "ENOSPC")
	t.Logf("BF16Kernel: %s", kernel)
	assert.Contains(t, kernel, "ENOSPC")
	want := cpu.BF16Widen
	if cpu.HasBF16() {
		want = cpu.BF16AVX512
	}
	assert.True(t, strings.HasPrefix(kernel, want.String()+" ("), kernel)

	mm, err := NewBF16Compute()
	require.NoError(t, err)
	m, k, n := 9, 300, 70
	r := rand.New(rand.NewPCG(51, 52))
	x := randVec(r, m*k)
	w := randWeights(r, n, k, true)
	got := make([]float32, m*n)
	require.NoError(t, mm.MatMulT(got, x, m, w))
	assert.LessOrEqual(t, tensor.RelL2(got, roundedProduct(x, m, w)), 1.0/256)
	err = BlockedAMX{}.MatMulT(got, x, m, w)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ENOSPC")
}
