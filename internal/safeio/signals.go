package safeio

import (
	"context"
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
// keep their default effect and other handlers are not disturbed; a signal
// the process was started with ignored stays ignored (see handled).
var temps struct {
	mu     sync.Mutex
	live   map[int]string
	next   int
	ch     chan os.Signal
	dying  bool
	onKill func(os.Signal) // tests replace the final re-raise
}

// handled are the signals the handler catches: SIGINT, SIGTERM and the
// extras, less any this process was started with ignored. `nohup` starts
// a command with SIGHUP ignored and a shell's background job has SIGINT
// ignored; Notify would turn them back on, so they stay ignored. Read at
// package initialisation, before any Notify of this process.
var handled = withoutIgnored(append([]os.Signal{syscall.SIGINT, syscall.SIGTERM}, extraSignals...))

func withoutIgnored(sigs []os.Signal) []os.Signal {
	var out []os.Signal
	for _, s := range sigs {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}

// ignoredAtStart are the signals of handled's list that were ignored when
// the process started.
var ignoredAtStart = func() map[os.Signal]bool {
	m := map[os.Signal]bool{}
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		m[s] = signal.Ignored(s)
	}
	return m
}()

// NotifyContext is signal.NotifyContext for the signals among sigs that
// the process was not started with ignored: a command run under `nohup`,
// or in the background of a shell, keeps ignoring what its parent told it
// to ignore.
func NotifyContext(ctx context.Context, sigs ...os.Signal) (context.Context, context.CancelFunc) {
	var keep []os.Signal
	for _, s := range sigs {
		if !ignoredAtStart[s] {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return context.WithCancel(ctx)
	}
	return signal.NotifyContext(ctx, keep...)
}

// TrackTemp registers a scratch file or directory that is not an output
// (a probe's working directory, say) for removal on the signals above,
// as the writers' temps are; call the returned function once it is gone.
func TrackTemp(path string) (untrack func()) { return track(path) }

// track registers a temp path for removal on a signal; the returned
// function unregisters it (call it once the temp is renamed or removed).
func track(path string) (untrack func()) {
	untrack, _ = trackCreated(func() (string, error) { return path, nil })
	return untrack
}

// trackCreated installs the handler, then creates a temp with create and
// registers what it made, all under the handler's lock: a signal between
// the creation and the registration would otherwise end the process by
// its default action and leave the new temp behind. A signal that comes
// meanwhile waits for the lock, then finds the temp registered.
func trackCreated(create func() (string, error)) (untrack func(), err error) {
	temps.mu.Lock()
	defer temps.mu.Unlock()
	if temps.ch == nil && !temps.dying && len(handled) > 0 {
		temps.ch = make(chan os.Signal, 1)
		signal.Notify(temps.ch, handled...)
		go handle(temps.ch)
	}
	path, err := create()
	if err != nil {
		if len(temps.live) == 0 && temps.ch != nil && !temps.dying {
			signal.Stop(temps.ch)
			close(temps.ch)
			temps.ch = nil
		}
		return nil, err
	}
	if temps.live == nil {
		temps.live = map[int]string{}
	}
	id := temps.next
	temps.next++
	temps.live[id] = path
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
	}, nil
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

// renameUnlessDying renames a temp over its target under the handler's
// lock. A signal being handled has removed the temps and is ending the
// process with the signal's status: the rename then waits for that end
// (awaitDeath) instead of failing on the missing temp and letting the
// command end first, with another status and a message about a rename.
func renameUnlessDying(from, to string) error {
	temps.mu.Lock()
	if temps.dying {
		temps.mu.Unlock()
		return awaitDeath()
	}
	defer temps.mu.Unlock()
	return os.Rename(from, to)
}

// awaitDeath blocks until handle ends the process (reraise exits after a
// second at most); tests replace it.
var awaitDeath = func() error { select {} }

// LiveTemps returns how many temporary files or directories are open for
// writing now (for tests of the cleanup).
func LiveTemps() int {
	temps.mu.Lock()
	defer temps.mu.Unlock()
	return len(temps.live)
}
