package safeio

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// tempMarker is in the name of every temporary file or directory qwenref
// creates: ".<target>.qwenref-tmp-<pid>.<where>-<random>". The pid lets a
// later run tell a stale temp (its writer is gone) from one being written
// right now, and <where> (processTag) says which pids it may ask about.
const tempMarker = ".qwenref-tmp-"

// StaleAge is how long a temp written by a process this one cannot see
// (another container's PID namespace, another host on a shared volume)
// must go untouched before it is taken for stale and removed.
const StaleAge = 24 * time.Hour

// processTag says where this process's pid means something: the host name
// and the PID namespace, hashed to 8 hex digits. Two containers on one
// volume (or two hosts on a network file system) have different tags, so
// neither takes the other's live temp for a dead process's.
var processTag = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	ns, _ := os.Readlink("/proc/self/ns/pid") // "pid:[4026531836]" on Linux
	h := fnv.New32a()
	h.Write([]byte(host + "\x00" + ns))
	return fmt.Sprintf("%08x", h.Sum32())
})

// WriteOptions say what an output must not be.
type WriteOptions struct {
	// Inputs are the files the command reads (weights, config, ids, ...).
	// The target may not be any of them, however it is spelled (links,
	// relative paths, hard links: compared with os.SameFile).
	Inputs []string
	// Mode is the permission of a new file; 0 means 0644. A file that is
	// replaced keeps its own mode.
	Mode os.FileMode
}

// CheckTarget says whether path may be written as an output: absent, or a
// regular file (or a link to one) that can be written and is none of the
// inputs. It returns the path to replace (links resolved) and the mode
// the new file gets. Commands call it before their work, so that a bad
// --out fails at once; WriteFile and CreateTemp call it again.
func CheckTarget(path string, opts WriteOptions) (resolved string, mode os.FileMode, err error) {
	mode = opts.Mode
	if mode == 0 {
		mode = 0o644
	}
	if path == "" {
		return "", 0, errors.New("empty output path")
	}
	resolved = path
	lst, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		dir := filepath.Dir(path)
		if st, err := os.Stat(dir); err != nil {
			return "", 0, fmt.Errorf("output %s: directory %s: %w", Clean(path), Clean(dir), Bare(err))
		} else if !st.IsDir() {
			return "", 0, fmt.Errorf("output %s: %s is not a directory", Clean(path), Clean(dir))
		}
		return resolved, mode, nil
	case err != nil:
		return "", 0, fmt.Errorf("output %s: %w", Clean(path), Bare(err))
	}
	st := lst
	if lst.Mode()&os.ModeSymlink != 0 {
		if resolved, err = filepath.EvalSymlinks(path); err != nil {
			return "", 0, fmt.Errorf("output %s: a symbolic link that does not resolve: %w", Clean(path), Bare(err))
		}
		if st, err = os.Lstat(resolved); err != nil {
			return "", 0, fmt.Errorf("output %s: %w", Clean(path), Bare(err))
		}
	}
	if !st.Mode().IsRegular() {
		return "", 0, fmt.Errorf("output %s: refusing to replace a %s; only a regular file or a new path can be an output", Clean(path), kindOf(st.Mode()))
	}
	for _, in := range opts.Inputs {
		if ist, err := os.Stat(in); err == nil && os.SameFile(ist, st) {
			return "", 0, fmt.Errorf("output %s: is the input %s; refusing to overwrite an input", Clean(path), Clean(in))
		}
	}
	if err := writable(resolved); err != nil {
		return "", 0, fmt.Errorf("output %s: not writable: %w", Clean(path), err)
	}
	return resolved, st.Mode().Perm(), nil
}

// Bare drops the path a *PathError repeats (the message names it already,
// escaped) and keeps any other error whole: EvalSymlinks reports a loop of
// links with an error that wraps nothing.
func Bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// WriteFile writes path atomically: fill writes the content to a temporary
// file beside the target, which is then synced and renamed over it. On any
// error, or a SIGINT/SIGTERM meanwhile, the temporary file is removed and
// the target is left as it was.
func WriteFile(path string, fill func(io.Writer) error, opts WriteOptions) error {
	t, err := CreateTemp(path, opts)
	if err != nil {
		return err
	}
	if err := fill(t.File); err != nil {
		_ = t.Discard()
		return fmt.Errorf("%s: %w", Clean(path), err)
	}
	return t.Commit()
}

// Temp is a temporary file that becomes the target on Commit. Use its File
// for writes (WriteAt and Truncate included).
type Temp struct {
	*os.File
	target   string // the path to replace (links resolved)
	shown    string // the path the user gave, for messages
	opts     WriteOptions
	mode     os.FileMode
	untrack  func()
	finished bool
}

// CreateTemp checks the target (see CheckTarget), removes stale temps of
// a previous run for it, and creates a temporary file in its directory
// that is removed if the process gets SIGINT or SIGTERM.
func CreateTemp(path string, opts WriteOptions) (*Temp, error) {
	target, mode, err := CheckTarget(path, opts)
	if err != nil {
		return nil, err
	}
	dir, base := filepath.Split(target)
	if dir == "" {
		dir = "."
	}
	RemoveStale(dir, base)
	var f *os.File
	untrack, err := trackCreated(func() (string, error) {
		var err error
		f, err = os.CreateTemp(dir, tempPrefix(base)+"*")
		if err != nil {
			return "", err
		}
		return f.Name(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", Clean(path), err)
	}
	return &Temp{File: f, target: target, shown: path, opts: opts, mode: mode, untrack: untrack}, nil
}

// tempPrefix is the name prefix of this process's temps for base.
func tempPrefix(base string) string {
	return "." + tempBase(base) + tempMarker + strconv.Itoa(os.Getpid()) + "." + processTag() + "-"
}

// maxTempBase is how much of the target's name a temp's name repeats: the
// rest of it takes about 40 bytes, and a name may have 255 in all, so a
// target named with 220 bytes must still get a temp.
const maxTempBase = 160

// tempBase is base cut to maxTempBase bytes at a character boundary.
func tempBase(base string) string {
	if len(base) <= maxTempBase {
		return base
	}
	n := maxTempBase
	for n > 0 && !utf8.RuneStart(base[n]) {
		n--
	}
	return base[:n]
}

// Commit syncs the temporary file, gives it the target's mode, checks the
// target once more and renames over it. On failure the temp is removed.
func (t *Temp) Commit() error {
	if t.finished {
		return fmt.Errorf("output %s: already finished", Clean(t.shown))
	}
	err := t.File.Chmod(t.mode)
	if err == nil {
		err = t.File.Sync()
	}
	if cerr := t.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The target may have changed since the check (a FIFO put there).
		_, _, err = CheckTarget(t.shown, t.opts)
	}
	if err == nil {
		err = renameUnlessDying(t.File.Name(), t.target)
	}
	if err != nil {
		_ = t.Discard()
		if strings.Contains(err.Error(), Clean(t.shown)) {
			return err
		}
		return fmt.Errorf("output %s: %w", Clean(t.shown), err)
	}
	t.finished = true
	t.untrack()
	if d, err := os.Open(filepath.Dir(t.target)); err == nil {
		_ = d.Sync() // best effort: persist the rename
		_ = d.Close()
	}
	return nil
}

// Discard closes and removes the temporary file; the target is untouched.
// It is a no-op after Commit or Discard.
func (t *Temp) Discard() error {
	if t.finished {
		return nil
	}
	t.finished = true
	_ = t.File.Close()
	err := os.Remove(t.File.Name())
	t.untrack()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("output %s: removing temporary file: %w", Clean(t.shown), err)
	}
	return nil
}

// TempDir creates a temporary directory beside target (for a set of files
// that must appear together, such as a checkpoint's shards), removed with
// its contents on SIGINT/SIGTERM until done is called with keep=true.
func TempDir(target string) (dir string, done func(keep bool), err error) {
	parent, base := filepath.Split(filepath.Clean(target))
	if parent == "" {
		parent = "."
	}
	RemoveStale(parent, base)
	untrack, err := trackCreated(func() (string, error) {
		var err error
		dir, err = mkdirTemp(parent, tempPrefix(base))
		return dir, err
	})
	if err != nil {
		return "", nil, fmt.Errorf("output %s: %w", Clean(target), err)
	}
	return dir, func(keep bool) {
		if !keep {
			_ = os.RemoveAll(dir)
		}
		untrack()
	}, nil
}

// mkdirTemp makes a new directory prefix+random in parent with mode 0777
// less the umask, as mkdir does: the directory becomes the output, so it
// must not keep os.MkdirTemp's private 0700.
func mkdirTemp(parent, prefix string) (string, error) {
	var b [8]byte
	for range 100 {
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		dir := filepath.Join(parent, prefix+hex.EncodeToString(b[:]))
		err := os.Mkdir(dir, 0o777)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", errors.New("no unused temporary name")
}

// RemoveStale removes temps for base in dir that an earlier qwenref left
// behind: files or directories named ".<base>.qwenref-tmp-<pid>.<where>-*"
// whose process no longer runs, when <where> is this process's; those of
// another PID namespace or host only once untouched for StaleAge. (Names
// without <where>, from older versions, go by the pid alone.) It returns
// the paths removed.
func RemoveStale(dir, base string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	prefix := "." + tempBase(base) + tempMarker
	var removed []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		owner, _, ok := strings.Cut(rest, "-")
		pidText, tag, tagged := strings.Cut(owner, ".")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if e.Type()&os.ModeSymlink != 0 || !(e.Type().IsRegular() || e.IsDir()) {
			continue // not something we create: leave it
		}
		p := filepath.Join(dir, e.Name())
		if tagged && tag != processTag() {
			if !untouchedFor(p, StaleAge) {
				continue
			}
		} else if pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if os.RemoveAll(p) == nil {
			removed = append(removed, p)
		}
	}
	return removed
}

// untouchedFor reports whether neither p nor (for a directory) anything
// directly in it was modified within age.
func untouchedFor(p string, age time.Duration) bool {
	cutoff := time.Now().Add(-age)
	fi, err := os.Lstat(p)
	if err != nil || fi.ModTime().After(cutoff) {
		return false
	}
	if !fi.IsDir() {
		return true
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return false
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || info.ModTime().After(cutoff) {
			return false
		}
	}
	return true
}
