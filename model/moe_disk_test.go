//go:build linux

package model

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/qwenref/qwenref/tensor"
)

// procReadBytes is this process's read_bytes from /proc/self/io: bytes
// fetched from storage (page-cache hits do not count).
func procReadBytes(t *testing.T) int64 {
	f, err := os.Open("/proc/self/io")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "read_bytes: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no read_bytes in /proc/self/io")
	return 0
}

// evictFiles drops the checkpoint's pages from the page cache, so the next
// step reads from storage what it touches.
func evictFiles(t *testing.T, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	require.NoError(t, err)
	for _, p := range files {
		f, err := os.Open(p)
		require.NoError(t, err)
		require.NoError(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
		f.Close()
	}
}

// activeBytes is the weight bytes one step used: every dense matrix, each
// sparse layer's router and shared expert, and the experts it chose.
func activeBytes(m *Model, chosen map[int]map[int]bool) int64 {
	n := m.LMHead.Bytes()
	for i := range m.Blocks {
		b := &m.Blocks[i]
		for _, x := range b.matrices() {
			if x != nil && !isExpert(b, x) {
				n += x.Bytes()
			}
		}
		if b.MoE != nil {
			for e := range chosen[i] {
				n += b.MoE.W.Gate[e].Bytes() + b.MoE.W.Up[e].Bytes() + b.MoE.W.Down[e].Bytes()
			}
		}
	}
	return n
}

func isExpert(b *Block, x *tensor.Matrix) bool {
	if b.MoE == nil {
		return false
	}
	for e := range b.MoE.W.Gate {
		if x == b.MoE.W.Gate[e] || x == b.MoE.W.Up[e] || x == b.MoE.W.Down[e] {
			return true
		}
	}
	return false
}

// A memory-mapped MoE model reads, per decode step from a cold page cache,
// about the weights the step uses (the routed experts, not their
// neighbours), and in the warm steady state what the page cache misses.
// It runs on a checkpoint named by QWENREF_DISK_MODEL, e.g.
//
//	qwenref synth --shape 35b-a3b --layers 20 --out /tmp/q35a3b-20l
//	QWENREF_DISK_MODEL=/tmp/q35a3b-20l go test -run TestMoEDecodeReadsOnlyActiveExperts -v ./model
//
// and logs per step the time, CPU time, bytes read and weight bytes used.
// On a 24 GiB machine with a 35.7 GB checkpoint: docs/perf.md.
func TestMoEDecodeReadsOnlyActiveExperts(t *testing.T) {
	dir := os.Getenv("QWENREF_DISK_MODEL")
	if dir == "" {
		t.Skip("QWENREF_DISK_MODEL names no checkpoint (a synthetic 35b-a3b: see the comment)")
	}
	m, err := Load(dir)
	require.NoError(t, err)
	defer m.Close()
	require.True(t, m.Config.IsMoE(), "%s is not a mixture-of-experts checkpoint", dir)
	m.SetStreaming(true)
	be, err := ParseBackend("chunked")
	require.NoError(t, err)
	chosen := map[int]map[int]bool{}
	rec := func(stage string, x *tensor.Tensor) {
		var li int
		if _, err := fmt.Sscanf(stage, "layers.%d.router_experts", &li); err == nil && strings.HasSuffix(stage, "router_experts") {
			if chosen[li] == nil {
				chosen[li] = map[int]bool{}
			}
			for _, v := range x.Data {
				chosen[li][int(v)] = true
			}
		}
	}
	s := m.NewSession()
	_, err = s.Forward([]int{11, 22, 33, 44, 55, 66, 77, 88}, be, Options{LastOnly: true})
	require.NoError(t, err)
	step := func(id int, cold bool) (wall, cpu time.Duration, read, active int64) {
		if cold {
			evictFiles(t, dir)
		}
		clear(chosen)
		var u0, u1 syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &u0))
		r0, t0 := procReadBytes(t), time.Now()
		_, err := s.Forward([]int{id}, be, Options{LastOnly: true, Record: rec})
		require.NoError(t, err)
		wall = time.Since(t0)
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &u1))
		cpu = time.Duration(u1.Utime.Nano() + u1.Stime.Nano() - u0.Utime.Nano() - u0.Stime.Nano())
		return wall, cpu, procReadBytes(t) - r0, activeBytes(m, chosen)
	}
	for i := range 3 {
		wall, cpu, read, active := step(100+i, true)
		t.Logf("cold step %d: %.2f s (CPU %.2f s), read %.0f MB, weights used %.0f MB", i, wall.Seconds(), cpu.Seconds(), float64(read)/1e6, float64(active)/1e6)
		if read == 0 {
			t.Skip("no bytes read from storage after evicting the files (a RAM file system?): nothing to measure")
		}
		assert.Less(t, float64(read), 1.15*float64(active), "a cold step reads about what it uses, not the experts' neighbours")
	}
	var walls, cpus, reads []float64
	for i := range 30 {
		wall, cpu, read, _ := step(200+i, false)
		if i >= 10 { // past the warm-up of the page cache
			walls, cpus, reads = append(walls, wall.Seconds()), append(cpus, cpu.Seconds()), append(reads, float64(read)/1e6)
		}
	}
	t.Logf("warm steps 10-29: median %.2f s (CPU %.2f s), read %.0f MB", median(walls), median(cpus), median(reads))
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	t.Logf("peak RSS %.2f GB; weights %.2f GB", float64(ru.Maxrss)*1024/1e9, float64(m.WeightBytes())/1e9)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
