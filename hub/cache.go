// Package hub reads and writes the Hugging Face cache exactly as the Python
// huggingface_hub library lays it out, and downloads checkpoints into it
// through the hub's HTTP file API, so that a model fetched by `qwenref
// download` is seen by transformers and the other way round.
//
// The cache (CacheDir) holds one folder per repository:
//
//	models--Qwen--Qwen3.5-0.8B/
//	  refs/main                      the commit hash "main" pointed to
//	  blobs/<etag>                   file contents, named by sha256 (LFS) or git blob sha1
//	  snapshots/<commit>/<path>      relative symlinks ../../blobs/<etag>
//
// and downloads in progress take .locks/models--Qwen--Qwen3.5-0.8B/<etag>.lock
// and write blobs/<etag>.incomplete, as huggingface_hub does.
package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
)

// DefaultRevision is the branch used when no revision is given.
const DefaultRevision = "main"

// HomeDir is huggingface_hub's home: HF_HOME, else
// $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
func HomeDir() string {
	if h := os.Getenv("HF_HOME"); h != "" {
		return expandHome(h)
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(expandHome(x), "huggingface")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "."
	}
	return filepath.Join(home, ".cache", "huggingface")
}

// CacheDir is the hub cache: HF_HUB_CACHE, else the legacy
// HUGGINGFACE_HUB_CACHE, else HomeDir()/hub.
func CacheDir() string {
	for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := os.Getenv(v); d != "" {
			return expandHome(d)
		}
	}
	return filepath.Join(HomeDir(), "hub")
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}

// Offline reports whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set
// to a true value (1, ON, YES, TRUE, any case), as huggingface_hub reads it.
func Offline() bool {
	if os.Getenv("HF_HUB_OFFLINE") != "" {
		return envTrue("HF_HUB_OFFLINE")
	}
	return envTrue("TRANSFORMERS_OFFLINE")
}

// ProgressDisabled reports whether HF_HUB_DISABLE_PROGRESS_BARS is true.
func ProgressDisabled() bool { return envTrue("HF_HUB_DISABLE_PROGRESS_BARS") }

// envTrue reads a boolean variable as huggingface_hub does.
func envTrue(name string) bool {
	switch strings.ToUpper(os.Getenv(name)) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// repoPart is one side of org/name as the hub accepts it.
var repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)

var commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommitHash reports whether rev is a full 40-hex commit id.
func IsCommitHash(rev string) bool { return commitHash.MatchString(rev) }

// ParseRef splits "org/name" or "org/name@revision" and validates both.
// The revision defaults to DefaultRevision.
func ParseRef(ref string) (repo, revision string, err error) {
	repo, revision = ref, DefaultRevision
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		repo, revision = ref[:i], ref[i+1:]
	}
	if err := ValidateRepoID(repo); err != nil {
		return "", "", err
	}
	if err := validateRevision(revision); err != nil {
		return "", "", err
	}
	return repo, revision, nil
}

// LooksLikeRepoID reports whether s has the shape org/name[@revision]
// (it says nothing about whether the repository exists).
func LooksLikeRepoID(s string) bool {
	_, _, err := ParseRef(s)
	return err == nil
}

// ValidateRepoID checks that repo is org/name with the characters the hub
// allows and no "--" or ".." (which would break the cache folder name).
func ValidateRepoID(repo string) error {
	org, name, ok := strings.Cut(repo, "/")
	if !ok || !repoPart.MatchString(org) || !repoPart.MatchString(name) {
		return fmt.Errorf("%q is not a Hugging Face repo id: want org/name (letters, digits, '-', '_', '.')", repo)
	}
	if strings.Contains(repo, "--") || strings.Contains(repo, "..") {
		return fmt.Errorf("%q is not a Hugging Face repo id: '--' and '..' are not allowed", repo)
	}
	return nil
}

// validateRevision rejects revisions that could escape refs/ (a branch
// may contain '/', as in refs/pr/1).
func validateRevision(rev string) error {
	if rev == "" {
		return errors.New("empty revision after '@'")
	}
	if len(rev) > 255 || strings.HasPrefix(rev, "/") || strings.Contains(rev, "\\") || !printable(rev) {
		return fmt.Errorf("revision %s is not a valid branch, tag or commit", safeio.Quote(rev))
	}
	for _, part := range strings.Split(rev, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("revision %s is not a valid branch, tag or commit", safeio.Quote(rev))
		}
	}
	return nil
}

// RepoFolder is the cache folder name of a model repository:
// "Qwen/Qwen3.5-0.8B" → "models--Qwen--Qwen3.5-0.8B".
func RepoFolder(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// NotCachedError says that a repository or revision is not in the cache.
type NotCachedError struct {
	Repo, Revision, CacheDir, Missing string
}

// Error names the cache, the revision, what is missing and the download
// command that fetches it.
func (e *NotCachedError) Error() string {
	return fmt.Sprintf("%s@%s is not in the Hugging Face cache %s (%s); fetch it with: qwenref download %s%s",
		e.Repo, e.Revision, safeio.Clean(e.CacheDir), e.Missing, e.Repo, revisionFlag(e.Revision))
}

func revisionFlag(rev string) string {
	if rev == DefaultRevision {
		return ""
	}
	return " --revision " + rev
}

// Resolve finds the snapshot directory of repo at revision in cacheDir,
// offline: a branch or tag is read from refs/<revision>, a commit hash
// names snapshots/<hash> directly. It checks that the snapshot holds a
// config.json whose blob exists, so a half-written or pruned snapshot
// fails here with the missing file named instead of deep in loading.
func Resolve(cacheDir, repo, revision string) (string, error) {
	if err := ValidateRepoID(repo); err != nil {
		return "", err
	}
	if err := validateRevision(revision); err != nil {
		return "", err
	}
	storage := filepath.Join(cacheDir, RepoFolder(repo))
	if _, err := os.Stat(storage); err != nil {
		return "", &NotCachedError{repo, revision, cacheDir, "no " + RepoFolder(repo) + " folder"}
	}
	commit := revision
	if !IsCommitHash(revision) {
		ref := filepath.Join(storage, "refs", filepath.FromSlash(revision))
		data, err := readSmall(ref, maxRefBytes, "a ref")
		if err != nil {
			return "", fmt.Errorf("%w: the cache is damaged; run qwenref download %s%s again", err, repo, revisionFlag(revision))
		}
		if data == nil {
			return "", &NotCachedError{repo, revision, cacheDir, "no refs/" + revision}
		}
		commit = strings.TrimSpace(string(data))
		if !IsCommitHash(commit) {
			return "", fmt.Errorf("%s: holds %s, not a 40-hex commit hash: the cache is damaged; run qwenref download %s%s again",
				safeio.Clean(ref), safeio.Quote(commit), repo, revisionFlag(revision))
		}
	}
	snap := filepath.Join(storage, "snapshots", commit)
	if st, err := os.Stat(snap); err != nil || !st.IsDir() {
		return "", &NotCachedError{repo, revision, cacheDir, "no snapshots/" + commit}
	}
	blobs := filepath.Join(storage, "blobs")
	cfg := filepath.Join(snap, "config.json")
	if _, err := os.Lstat(cfg); err != nil {
		return "", &NotCachedError{repo, revision, cacheDir, "snapshots/" + commit + " has no config.json"}
	}
	if err := checkEntry(cfg, blobs); err != nil {
		return "", fmt.Errorf("%w: the cache is damaged; run qwenref download %s%s again", err, repo, revisionFlag(revision))
	}
	if err := checkShards(snap, blobs); err != nil {
		return "", fmt.Errorf("%w: the snapshot is incomplete or damaged (huggingface_hub writes refs before the files); run qwenref download %s%s", err, repo, revisionFlag(revision))
	}
	return snap, nil
}

// maxRefBytes caps refs/<revision> (a 40-hex hash).
const maxRefBytes = 4096

// maxIndexBytes caps model.safetensors.index.json, as the loader does.
const maxIndexBytes = 64 << 20

// maxShards is the most shards Resolve checks (the loader's limit too).
const maxShards = 4096

// checkShards checks that every shard model.safetensors.index.json names
// is in the snapshot, when there is an index. The index and each shard
// entry must be regular files or links into the repository's blobs/.
func checkShards(snap, blobs string) error {
	path := filepath.Join(snap, "model.safetensors.index.json")
	if _, err := os.Lstat(path); err != nil {
		return nil // no index: a single file, or the loader will say what is missing
	}
	if err := checkEntry(path, blobs); err != nil {
		return err
	}
	data, err := readSmall(path, maxIndexBytes, "model.safetensors.index.json")
	if err != nil {
		return err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil // the loader reports a malformed index with its details
	}
	seen := map[string]bool{}
	var missing []string
	for _, shard := range idx.WeightMap {
		if seen[shard] || validateRepoPath(shard) != nil {
			continue
		}
		if len(seen) == maxShards {
			return nil // the loader refuses this many with its own message
		}
		seen[shard] = true
		entry := filepath.Join(snap, filepath.FromSlash(shard))
		if _, err := os.Stat(entry); err != nil { // absent, or a link to nothing
			missing = append(missing, shard)
			continue
		}
		if err := checkEntry(entry, blobs); err != nil {
			return err
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	return fmt.Errorf("%s: %d of the %d shards its index names are missing (%s)", safeio.Clean(snap), len(missing), len(seen), safeio.List(missing, 10))
}
