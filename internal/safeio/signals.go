package safeio

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// The one signal handler of qwenref's writers: while any temporary file or
// directory is live, SIGINT, SIGTERM and (on unix) SIGHUP — a closed
// terminal, a dropped ssh session — remove them all and then end the
// process as the signal would have (exit status 130, 143 or 129 in a
// shell). So does SIGPIPE when standard output or standard error is a
// broken pipe (`qwenref … 2>&1 | head`); a SIGPIPE from any other
// descriptor (a network peer gone) only fails that write, as Go's default
// has it. With no temps live the handler is not installed, so the signals
// keep their default effect and other handlers are not disturbed.
var temps struct {
	mu     sync.Mutex
	live   map[int]string
	next   int
	ch     chan os.Signal
	dying  bool
	onKill func(os.Signal) // tests replace the final re-raise
}

// TrackTemp registers a scratch file or directory that is not an output
// (a probe's working directory, say) for removal on the signals above,
// as the writers' temps are; call the returned function once it is gone.
func TrackTemp(path string) (untrack func()) { return track(path) }

// track registers a temp path for removal on a signal; the returned
// function unregisters it (call it once the temp is renamed or removed).
func track(path string) (untrack func()) {
	temps.mu.Lock()
	defer temps.mu.Unlock()
	if temps.live == nil {
		temps.live = map[int]string{}
	}
	id := temps.next
	temps.next++
	temps.live[id] = path
	if len(temps.live) == 1 {
		temps.ch = make(chan os.Signal, 1)
		signal.Notify(temps.ch, append([]os.Signal{syscall.SIGINT, syscall.SIGTERM}, extraSignals...)...)
		go handle(temps.ch)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			temps.mu.Lock()
			defer temps.mu.Unlock()
			delete(temps.live, id)
			if len(temps.live) == 0 && temps.ch != nil && !temps.dying {
				signal.Stop(temps.ch)
				close(temps.ch)
				temps.ch = nil
			}
		})
	}
}

// handle waits for a signal on ch (closed when no temps are live).
func handle(ch chan os.Signal) {
	var sig os.Signal
	for {
		var ok bool
		if sig, ok = <-ch; !ok {
			return
		}
		if !ignorable(sig) {
			break
		}
	}
	temps.mu.Lock()
	temps.dying = true
	for _, p := range temps.live {
		_ = os.RemoveAll(p)
	}
	kill := temps.onKill
	temps.mu.Unlock()
	if kill != nil {
		kill(sig)
		return
	}
	reraise(sig)
}

// LiveTemps returns how many temporary files or directories are open for
// writing now (for tests of the cleanup).
func LiveTemps() int {
	temps.mu.Lock()
	defer temps.mu.Unlock()
	return len(temps.live)
}
