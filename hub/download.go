package hub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/qwenref/qwenref/internal/safeio"
)

// Options choose what Download fetches and where.
type Options struct {
	Revision string   // branch, tag or commit; default DefaultRevision
	Include  []string // fnmatch patterns; none: DefaultInclude (top level)
	// LocalDir, when set, receives plain files (as huggingface_hub's
	// local_dir: metadata under DIR/.cache/huggingface/download) instead
	// of the cache.
	LocalDir string
}

// FileStatus says what Download did with one file.
type FileStatus string

// The FileStatus values.
const (
	StatusCached     FileStatus = "cached"     // already there, nothing fetched
	StatusLinked     FileStatus = "linked"     // blob was there, snapshot entry made
	StatusDownloaded FileStatus = "downloaded" // fetched in full
	StatusResumed    FileStatus = "resumed"    // an earlier partial file was continued
)

// FileResult is one file of a download.
type FileResult struct {
	RepoFile
	Status FileStatus
}

// Result is where a download put the checkpoint.
type Result struct {
	Repo, Revision, Commit string
	Dir                    string // the snapshot (or LocalDir): pass it as --model
	Files                  []FileResult
}

// target is where one file goes: its final path, the partial file, the
// lock, and what makes it visible once complete.
type target struct {
	file       RepoFile
	root       string // the cache or the local dir: every folder below it must be real
	final      string // blob (cache) or the file itself (local dir)
	incomplete string
	lock       string
	shared     bool                 // final is a content-addressed blob: if it exists it is right
	done       func() (bool, error) // already complete and visible?
	publish    func() error         // after final exists: symlink or metadata
}

// Download fetches repo's files into the cache (or opt.LocalDir): it lists
// the revision, checks the free disk space for what is missing, then for
// each file takes huggingface_hub's lock, resumes or starts
// <blob>.incomplete with Range requests, verifies size and sha256 (git
// sha1 for non-LFS files), renames it into place and links it into the
// snapshot. refs/<revision> is written last, so an interrupted download
// is never resolved as complete.
func (c *Client) Download(ctx context.Context, repo string, opt Options) (*Result, error) {
	if c.Offline {
		return nil, ErrOffline
	}
	rev := opt.Revision
	if rev == "" {
		rev = DefaultRevision
	}
	m, err := NewMatcher(opt.Include)
	if err != nil {
		return nil, err
	}
	info, err := c.Info(ctx, repo, rev)
	if err != nil {
		return nil, err
	}
	var files []RepoFile
	for _, f := range info.Files {
		if m.Match(f.Path) {
			files = append(files, f)
		}
	}
	if err := checkSelection(info, files, len(opt.Include) == 0); err != nil {
		return nil, err
	}
	res := &Result{Repo: repo, Revision: rev, Commit: info.Commit}
	storage := filepath.Join(c.CacheDir, RepoFolder(repo))
	var targets []*target
	for _, f := range files {
		if opt.LocalDir != "" {
			targets = append(targets, localTarget(opt.LocalDir, info.Commit, f))
		} else {
			targets = append(targets, cacheTarget(c.CacheDir, storage, info.Commit, f))
		}
	}
	res.Dir = filepath.Join(storage, "snapshots", info.Commit)
	if opt.LocalDir != "" {
		res.Dir = opt.LocalDir
	}
	need := missingBytes(targets)
	if c.Log != nil {
		fmt.Fprintf(c.Log, "%s@%s is commit %s: %d files, %s to fetch\n", repo, rev, info.Commit, len(targets), FormatBytes(need))
	}
	if err := checkDiskSpace(need, targets, res.Dir); err != nil {
		return nil, err
	}
	for _, t := range targets {
		st, err := c.fetch(ctx, repo, info.Commit, t)
		if err != nil {
			return nil, err
		}
		res.Files = append(res.Files, FileResult{t.file, st})
	}
	if opt.LocalDir == "" && rev != info.Commit {
		ref := filepath.Join(storage, "refs", filepath.FromSlash(rev))
		if old, err := readSmall(ref, maxRefBytes, "a ref"); err != nil || string(old) != info.Commit {
			err := ensureDir(c.CacheDir, filepath.Dir(ref))
			if err == nil {
				err = writeFileAtomic(ref, []byte(info.Commit))
			}
			if err != nil {
				return nil, fmt.Errorf("writing %s: %w", safeio.Clean(ref), err)
			}
		}
	}
	return res, nil
}

// checkSelection refuses an empty selection and, with the defaults, a
// repository qwenref could not load (no config.json or no safetensors).
func checkSelection(info *RepoInfo, files []RepoFile, defaults bool) error {
	names := make([]string, 0, len(info.Files))
	for _, f := range info.Files {
		names = append(names, f.Path)
	}
	sort.Strings(names)
	list := strings.Join(names, ", ")
	if len(names) > 12 {
		list = strings.Join(names[:12], ", ") + fmt.Sprintf(", … (%d files)", len(names))
	}
	if len(files) == 0 {
		return fmt.Errorf("no file of %s@%s matches the include patterns; it has: %s", info.Repo, info.Commit[:12], list)
	}
	if !defaults {
		return nil
	}
	var cfg, st bool
	for _, f := range files {
		cfg = cfg || f.Path == "config.json"
		st = st || strings.HasSuffix(f.Path, ".safetensors")
	}
	if !cfg || !st {
		return fmt.Errorf("%s@%s has no config.json or no *.safetensors at its top level, which qwenref needs (it has: %s); "+
			"pass --include to fetch other files", info.Repo, info.Commit[:12], list)
	}
	return nil
}

// cacheTarget places f in the hub cache layout.
func cacheTarget(cacheDir, storage, commit string, f RepoFile) *target {
	etag := f.ETag()
	blobs := filepath.Join(storage, "blobs")
	blob := filepath.Join(blobs, etag)
	pointer := filepath.Join(storage, "snapshots", commit, filepath.FromSlash(f.Path))
	t := &target{
		file: f, root: cacheDir, final: blob, incomplete: blob + ".incomplete", shared: true,
		lock: filepath.Join(cacheDir, ".locks", filepath.Base(storage), etag+".lock"),
	}
	t.done = func() (bool, error) {
		lst, err := os.Lstat(pointer)
		switch {
		case err != nil:
			return false, nil
		case lst.Mode()&os.ModeSymlink != 0:
			// Only a link to this file's own blob counts; any other is replaced.
			target, _ := linkTarget(pointer)
			return inBlobs(target, blobs) && filepath.Base(target) == etag && blobReady(blob, f.Size), nil
		default: // a copy, as huggingface_hub makes where links are not allowed
			return lst.Mode().IsRegular() && lst.Size() == f.Size, nil
		}
	}
	t.publish = func() error {
		if err := ensureDir(cacheDir, filepath.Dir(pointer)); err != nil {
			return err
		}
		return relativeSymlink(blob, pointer)
	}
	return t
}

// blobReady reports whether blob is a regular file (not a link) of size
// bytes: a blob is named by its hash, so such a file is taken as right.
func blobReady(blob string, size int64) bool {
	st, err := os.Lstat(blob)
	return err == nil && st.Mode().IsRegular() && st.Size() == size
}

// localTarget places f as a plain file under dir with huggingface_hub's
// local-dir metadata (commit, etag, timestamp).
func localTarget(dir, commit string, f RepoFile) *target {
	etag := f.ETag()
	file := filepath.Join(dir, filepath.FromSlash(f.Path))
	meta := filepath.Join(dir, ".cache", "huggingface", "download", filepath.FromSlash(f.Path)+".metadata")
	stem := strings.TrimSuffix(meta, ".metadata")
	t := &target{file: f, root: dir, final: file, incomplete: stem + "." + etag + ".incomplete", lock: stem + ".lock"}
	t.done = func() (bool, error) {
		st, err := os.Stat(file)
		if err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
			return false, nil
		}
		data, err := readSmall(meta, maxMetadataBytes, "download metadata")
		if err != nil || data == nil {
			return false, nil
		}
		lines := strings.Split(string(data), "\n")
		if len(lines) < 3 || lines[1] != etag {
			return false, nil
		}
		ts, err := strconv.ParseFloat(strings.TrimSpace(lines[2]), 64)
		// huggingface_hub trusts the metadata only if the file is not newer.
		return err == nil && float64(st.ModTime().UnixNano())/1e9-1 <= ts, nil
	}
	t.publish = func() error {
		hf := filepath.Join(dir, ".cache", "huggingface")
		if err := ensureDir(dir, filepath.Dir(meta)); err != nil {
			return err
		}
		gi := filepath.Join(hf, ".gitignore")
		if _, err := os.Lstat(gi); err != nil {
			_ = writeFileAtomic(gi, []byte("*"))
		}
		now := float64(time.Now().UnixNano()) / 1e9
		return writeFileAtomic(meta, fmt.Appendf(nil, "%s\n%s\n%.6f\n", commit, etag, now))
	}
	return t
}

// maxMetadataBytes caps a local-dir .metadata file (three short lines).
const maxMetadataBytes = 4096

// missingBytes is what is still to fetch, less any partial files.
func missingBytes(targets []*target) int64 {
	var need int64
	for _, t := range targets {
		if ok, _ := t.done(); ok {
			continue
		}
		if t.shared && blobReady(t.final, t.file.Size) {
			continue
		}
		need += t.file.Size
		if st, err := os.Stat(t.incomplete); err == nil && st.Size() <= t.file.Size {
			need -= st.Size()
		}
	}
	return need
}

// FormatBytes writes n bytes in decimal units (kB, MB, GB), as download
// reports sizes.
func FormatBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// checkDiskSpace compares need with the free space where the files go,
// before any byte is fetched.
func checkDiskSpace(need int64, targets []*target, dir string) error {
	if need == 0 || len(targets) == 0 {
		return nil
	}
	free, ok := safeio.FreeBytes(filepath.Dir(targets[0].final))
	if !ok {
		return nil
	}
	margin := need/100 + 16<<20
	if free < need+margin {
		f, n := safeio.GBPair(free, need+margin)
		return fmt.Errorf("%s has %s free but the download needs %s more (its size and a margin of 1%% + 16 MiB): free some space or choose another cache (HF_HUB_CACHE) or --local-dir",
			safeio.Clean(dir), f, n)
	}
	return nil
}

// relativeSymlink makes pointer a relative symlink to blob, replacing
// what was there atomically (a new link renamed over the old name, so a
// link planted there is replaced, never followed).
func relativeSymlink(blob, pointer string) error {
	rel, err := filepath.Rel(filepath.Dir(pointer), blob)
	if err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.tmp-%d", pointer, os.Getpid())
	_ = os.Remove(tmp)
	if err := os.Symlink(rel, tmp); err != nil {
		return fmt.Errorf("linking %s: %w", safeio.Clean(pointer), err)
	}
	if err := os.Rename(tmp, pointer); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("linking %s: %w", safeio.Clean(pointer), err)
	}
	return nil
}

// writeFileAtomic writes data to a new temporary file beside path, syncs
// it and renames it over path: a link at path is replaced, not followed
// (unlike safeio.WriteFile, which keeps a user's link to an output). The
// folder must exist (ensureDir).
func writeFileAtomic(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// errCut marks a transfer that ended early; it is resumed.
var errCut = errors.New("transfer cut")
