package linalg

import (
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestAMXUnderSignals: products on every core, several goroutines per
// core, each goroutine on its own thread with a kernel timer that signals
// that thread every 50 µs of its CPU time (SIGURG, the Go runtime's
// preemption signal, or SIGUSR1, caught here): so the signals land while
// the thread computes, mostly inside the kernel with live tiles, which the
// OS must save and restore around each handler (Go never preempts the
// assembly). Every result must equal the one computed before the signals
// started, bit for bit. Run it under -race too.
func TestAMXUnderSignals(t *testing.T) {
	needAMX(t)
	r := rand.New(rand.NewPCG(45, 46))
	m, k, n := 96, 1024, 256
	run := time.Second
	if testing.Short() {
		run = 300 * time.Millisecond
	}
	x := randVec(r, m*k)
	w := randWeights(r, n, k, true)
	want := make([]float32, m*n)
	require.NoError(t, BlockedAMX{Threads: 1}.MatMulT(want, x, m, w))

	caught := make(chan os.Signal, 1)
	signal.Notify(caught, syscall.SIGUSR1)
	defer signal.Stop(caught)
	var received atomic.Int64
	stop := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-stop:
				for { // what was queued before stop
					select {
					case <-caught:
						received.Add(1)
					default:
						return
					}
				}
			case <-caught:
				received.Add(1)
			}
		}
	}()

	workers := 3 * runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	bad, done := make([]int, workers), make([]int, workers)
	var expired atomic.Int64 // timer periods the workers ran through
	errs := make([]error, workers)
	deadline := time.Now().Add(run)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			sig := syscall.SIGURG
			if g%2 == 1 {
				sig = syscall.SIGUSR1
			}
			stopTimer, err := threadCPUTimer(sig, 50*time.Microsecond)
			if err != nil {
				errs[g] = err
				return
			}
			defer stopTimer()
			var t0, t1 unix.Timespec
			unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t0)
			defer func() {
				unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t1)
				expired.Add((t1.Nano() - t0.Nano()) / (50 * time.Microsecond).Nanoseconds())
			}()
			y := make([]float32, m*n)
			for i := 0; time.Now().Before(deadline); i++ {
				done[g]++
				// Every third product shares out its work, so kernels
				// also run on the other goroutines of parallel.For.
				threads := 1
				if i%3 == 2 {
					threads = runtime.GOMAXPROCS(0)
				}
				if err := (BlockedAMX{Threads: threads}).MatMulT(y, x, m, w); err != nil {
					errs[g] = err
					return
				}
				for j := range y {
					if y[j] != want[j] {
						bad[g]++
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	// The products rarely yield, so os/signal's goroutine and this one may
	// deliver the signals only now; they were sent while the threads
	// computed (the timers count the workers' CPU time alone).
	for wait := time.Now().Add(2 * time.Second); received.Load() == 0 && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	<-drained
	total := 0
	for g, b := range bad {
		require.NoError(t, errs[g], "goroutine %d", g)
		assert.Zero(t, b, "goroutine %d: %d of %d products differ from the quiet one", g, b, done[g])
		total += done[g]
	}
	t.Logf("%d products on %d goroutines, about %d timer signals; SIGUSR1 caught %d times (deliveries coalesce)", total, workers, expired.Load(), received.Load())
	require.Positive(t, received.Load(), "no signal arrived during the products")
}

// threadCPUTimer starts a POSIX timer that sends sig to the calling thread
// (which must be locked to its goroutine) every `every` of the thread's CPU
// time; the returned function deletes it.
func threadCPUTimer(sig syscall.Signal, every time.Duration) (func(), error) {
	// struct sigevent with SIGEV_THREAD_ID (4): the thread id sits where
	// the union of notification fields starts.
	ev := struct {
		value  uintptr
		signo  int32
		notify int32
		tid    int32
		_      [11]int32
	}{signo: int32(sig), notify: 4, tid: int32(unix.Gettid())}
	var id int32
	if _, _, e := unix.Syscall(unix.SYS_TIMER_CREATE, unix.CLOCK_THREAD_CPUTIME_ID, uintptr(unsafe.Pointer(&ev)), uintptr(unsafe.Pointer(&id))); e != 0 {
		return nil, e
	}
	spec := struct{ interval, value unix.Timespec }{unix.NsecToTimespec(every.Nanoseconds()), unix.NsecToTimespec(every.Nanoseconds())}
	if _, _, e := unix.Syscall6(unix.SYS_TIMER_SETTIME, uintptr(id), 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); e != 0 {
		unix.Syscall(unix.SYS_TIMER_DELETE, uintptr(id), 0, 0)
		return nil, e
	}
	return func() { unix.Syscall(unix.SYS_TIMER_DELETE, uintptr(id), 0, 0) }, nil
}
