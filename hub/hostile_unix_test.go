//go:build unix

package hub

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qwenref/qwenref/hub/hubtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mkfifo(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
	require.NoError(t, os.Symlink(target, link))
}

// entries lists a directory's names (none when it does not exist).
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// A folder of the cache replaced by a link to somewhere else is refused
// before anything is written through it; the cache root itself may be a
// link.
func TestDownloadRefusesLinkedCacheFolders(t *testing.T) {
	repo := tinyRepo(t, "org/tiny")
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	for _, folder := range []string{"models--org--tiny", "models--org--tiny/blobs", "models--org--tiny/snapshots",
		"models--org--tiny/snapshots/" + repo.Commit, "models--org--tiny/refs", ".locks", ".locks/models--org--tiny"} {
		t.Run(folder, func(t *testing.T) {
			c, _ := testClient(t, srv)
			outside := t.TempDir()
			link := filepath.Join(c.CacheDir, filepath.FromSlash(folder))
			symlink(t, outside, link)
			_, err := c.Download(context.Background(), "org/tiny", Options{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), link+": is a symbolic link, not a directory")
			assert.Empty(t, entries(t, outside), "nothing written outside the cache")
		})
	}
	t.Run("the root", func(t *testing.T) {
		c, _ := testClient(t, srv)
		real := c.CacheDir
		c.CacheDir = filepath.Join(t.TempDir(), "hub")
		require.NoError(t, os.Symlink(real, c.CacheDir))
		res, err := c.Download(context.Background(), "org/tiny", Options{})
		require.NoError(t, err)
		assert.FileExists(t, filepath.Join(real, "models--org--tiny", "snapshots", repo.Commit, "config.json"))
		_, err = Resolve(c.CacheDir, "org/tiny", "main")
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(c.CacheDir, "models--org--tiny", "snapshots", repo.Commit), res.Dir)
	})
}

// The local dir's own records are written only into real folders.
func TestDownloadLocalDirRefusesALinkedRecordFolder(t *testing.T) {
	srv := hubtest.NewServer(tinyRepo(t, "org/tiny"))
	defer srv.Close()
	c, _ := testClient(t, srv)
	dir, outside := t.TempDir(), t.TempDir()
	symlink(t, outside, filepath.Join(dir, ".cache", "huggingface", "download"))
	_, err := c.Download(context.Background(), "org/tiny", Options{LocalDir: dir, Include: []string{"config.json"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, ".cache", "huggingface", "download")+": is a symbolic link")
	assert.Empty(t, entries(t, outside))
}

// The partial file and the lock are written in place, so they are never
// opened through a link, a FIFO is refused without blocking, and a
// partial file with a second hard link is started afresh rather than
// written into.
func TestDownloadNeverWritesThroughAPartialFileOrLock(t *testing.T) {
	repo := tinyRepo(t, "org/tiny")
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	etag := hubtest.SHA256(repo.Files[shard1])
	partialOf := func(c *Client) string {
		return filepath.Join(c.CacheDir, "models--org--tiny", "blobs", etag+".incomplete")
	}
	lockOf := func(c *Client) string { return filepath.Join(c.CacheDir, ".locks", "models--org--tiny", etag+".lock") }
	precious := func(t *testing.T) string {
		p := filepath.Join(t.TempDir(), "precious")
		require.NoError(t, os.WriteFile(p, []byte("precious"), 0o644))
		return p
	}
	unchanged := func(t *testing.T, p string) {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, "precious", string(data), "a file outside the cache was written")
	}

	t.Run("partial is a link", func(t *testing.T) {
		c, _ := testClient(t, srv)
		p := precious(t)
		symlink(t, p, partialOf(c))
		_, err := c.Download(context.Background(), "org/tiny", Options{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), partialOf(c)+": is a symbolic link, not a regular file")
		unchanged(t, p)
	})
	t.Run("partial is a hard link", func(t *testing.T) {
		c, _ := testClient(t, srv)
		p := precious(t)
		require.NoError(t, os.MkdirAll(filepath.Dir(partialOf(c)), 0o755))
		require.NoError(t, os.Link(p, partialOf(c)))
		res, err := c.Download(context.Background(), "org/tiny", Options{})
		require.NoError(t, err)
		unchanged(t, p)
		data, err := os.ReadFile(filepath.Join(res.Dir, shard1))
		require.NoError(t, err)
		assert.Equal(t, repo.Files[shard1], data)
	})
	t.Run("partial is a FIFO", func(t *testing.T) {
		c, _ := testClient(t, srv)
		mkfifo(t, partialOf(c))
		var err error
		within(t, 10*time.Second, func() { _, err = c.Download(context.Background(), "org/tiny", Options{}) })
		require.Error(t, err)
		assert.Contains(t, err.Error(), partialOf(c)+": is a FIFO")
	})
	t.Run("lock is a link", func(t *testing.T) {
		c, _ := testClient(t, srv)
		target := filepath.Join(t.TempDir(), "created-outside")
		symlink(t, target, lockOf(c))
		_, err := c.Download(context.Background(), "org/tiny", Options{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), lockOf(c)+": is a symbolic link")
		assert.NoFileExists(t, target)
	})
}

// A snapshot entry that links outside its repository's blobs/ is not
// taken as downloaded: it is replaced by the link to the right blob.
func TestDownloadReplacesASnapshotEntryLinkingOutside(t *testing.T) {
	repo := tinyRepo(t, "org/tiny")
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	c, _ := testClient(t, srv)
	foreign := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(foreign, []byte(strings.Repeat(" ", len(repo.Files["config.json"]))), 0o644))
	entry := filepath.Join(c.CacheDir, "models--org--tiny", "snapshots", repo.Commit, "config.json")
	symlink(t, foreign, entry)
	res, err := c.Download(context.Background(), "org/tiny", Options{})
	require.NoError(t, err)
	for _, f := range res.Files {
		if f.Path == "config.json" {
			assert.Equal(t, StatusDownloaded, f.Status)
		}
	}
	link, err := os.Readlink(entry)
	require.NoError(t, err)
	assert.Equal(t, "../../blobs/"+hubtest.GitBlobSHA1(repo.Files["config.json"]), link)
}

// Offline resolution opens refs/<rev>, the index and the token file
// without blocking, only as regular files, and follows snapshot entries
// only into the repository's own blobs/.
func TestResolveRefusesSpecialFiles(t *testing.T) {
	commit := strings.Repeat("a", 40)
	for name, c := range map[string]struct {
		plant func(t *testing.T, storage, snap string)
		want  string
	}{
		"refs/main is a FIFO": {func(t *testing.T, storage, _ string) {
			require.NoError(t, os.Remove(filepath.Join(storage, "refs", "main")))
			mkfifo(t, filepath.Join(storage, "refs", "main"))
		}, "refs/main: is a FIFO (named pipe), not a regular file"},
		"refs/main is /dev/zero": {func(t *testing.T, storage, _ string) {
			require.NoError(t, os.Remove(filepath.Join(storage, "refs", "main")))
			symlink(t, "/dev/zero", filepath.Join(storage, "refs", "main"))
		}, "refs/main: is a character device, not a regular file"},
		"refs/main is huge": {func(t *testing.T, storage, _ string) {
			require.NoError(t, os.WriteFile(filepath.Join(storage, "refs", "main"), make([]byte, maxRefBytes+1), 0o644))
		}, "refs/main: a ref is larger than the limit of 4 KiB"},
		"index is a FIFO": {func(t *testing.T, _, snap string) {
			mkfifo(t, filepath.Join(snap, "model.safetensors.index.json"))
		}, "model.safetensors.index.json: is a FIFO (named pipe), not a regular file"},
		"index links to /dev/zero": {func(t *testing.T, _, snap string) {
			symlink(t, "/dev/zero", filepath.Join(snap, "model.safetensors.index.json"))
		}, `model.safetensors.index.json links to /dev/zero, outside its repository's blobs/`},
		"index blob is a FIFO": {func(t *testing.T, storage, snap string) {
			mkfifo(t, filepath.Join(storage, "blobs", "idx"))
			symlink(t, "../../blobs/idx", filepath.Join(snap, "model.safetensors.index.json"))
		}, "blobs/idx: is a FIFO (named pipe), not a regular file"},
		"index is huge": {func(t *testing.T, storage, snap string) {
			f, err := os.Create(filepath.Join(snap, "model.safetensors.index.json"))
			require.NoError(t, err)
			require.NoError(t, f.Truncate(maxIndexBytes+1)) // sparse: no disk used
			require.NoError(t, f.Close())
		}, "model.safetensors.index.json is larger than the limit of 64 MiB"},
		"config links outside": {func(t *testing.T, storage, snap string) {
			other := filepath.Join(t.TempDir(), "config.json")
			require.NoError(t, os.WriteFile(other, []byte("{}"), 0o644))
			require.NoError(t, os.Remove(filepath.Join(snap, "config.json")))
			symlink(t, other, filepath.Join(snap, "config.json"))
		}, "config.json links to /"},
		"shard links into another repository": {func(t *testing.T, storage, snap string) {
			index := `{"weight_map": {"a": "model.safetensors"}}`
			require.NoError(t, os.WriteFile(filepath.Join(snap, "model.safetensors.index.json"), []byte(index), 0o644))
			other := filepath.Join(filepath.Dir(storage), "models--org--other", "blobs", "w")
			require.NoError(t, os.MkdirAll(filepath.Dir(other), 0o755))
			require.NoError(t, os.WriteFile(other, nil, 0o644))
			symlink(t, "../../../models--org--other/blobs/w", filepath.Join(snap, "model.safetensors"))
		}, "model.safetensors links to ../../../models--org--other/blobs/w, outside its repository's blobs/"},
	} {
		t.Run(name, func(t *testing.T) {
			cache := t.TempDir()
			snap := fakeSnapshot(t, cache, "org/m", "main", commit)
			c.plant(t, filepath.Join(cache, RepoFolder("org/m")), snap)
			var err error
			within(t, 10*time.Second, func() { _, err = Resolve(cache, "org/m", "main") })
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	// An absolute link into the repository's own blobs/, through another
	// spelling of the cache, is fine.
	cache := t.TempDir()
	snap := fakeSnapshot(t, cache, "org/m", "main", commit)
	alias := filepath.Join(t.TempDir(), "alias")
	require.NoError(t, os.Symlink(cache, alias))
	cfg := filepath.Join(snap, "config.json")
	require.NoError(t, os.Remove(cfg))
	require.NoError(t, os.Symlink(filepath.Join(alias, RepoFolder("org/m"), "blobs", "abc123"), cfg))
	_, err := Resolve(cache, "org/m", "main")
	assert.NoError(t, err)
}

// The token file is read without blocking and only as a regular file;
// NewClient keeps the reason, and Download returns it before any request.
func TestTokenFileRefusesSpecialFiles(t *testing.T) {
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	fifo := filepath.Join(t.TempDir(), "token")
	mkfifo(t, fifo)
	for path, want := range map[string]string{fifo: "is a FIFO", "/dev/zero": "is a character device"} {
		t.Setenv("HF_TOKEN_PATH", path)
		var tok string
		within(t, 10*time.Second, func() { tok, _ = Token() })
		assert.Empty(t, tok)
		_, _, err := ReadToken()
		require.Error(t, err)
		assert.Contains(t, err.Error(), path+": "+want)
		c := NewClient()
		assert.Equal(t, err.Error(), c.ConfigErr.Error())
		srv := hubtest.NewServer()
		c.Endpoint, c.HTTP = srv.URL, srv.Hub.Client()
		_, derr := c.Download(context.Background(), "org/tiny", Options{})
		assert.Equal(t, c.ConfigErr, derr)
		assert.Empty(t, srv.Requests())
		srv.Close()
	}
	big := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(big, make([]byte, maxTokenBytes+1), 0o600))
	t.Setenv("HF_TOKEN_PATH", big)
	_, _, err := ReadToken()
	assert.ErrorContains(t, err, "the token file is larger than the limit of 4 KiB")
	t.Setenv("HF_TOKEN_PATH", filepath.Join(t.TempDir(), "absent"))
	tok, src, err := ReadToken()
	assert.NoError(t, err, "no token file is no error")
	assert.Empty(t, tok+src)
}
