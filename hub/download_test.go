package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qwenref/qwenref/hub/hubtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const goldenHub = "../testdata/golden/hub-bf16-sharded"

const shard1 = "model-00001-of-00002.safetensors"

func tinyRepo(t *testing.T, id string) *hubtest.Repo {
	t.Helper()
	files, err := hubtest.Checkpoint(goldenHub)
	require.NoError(t, err)
	return &hubtest.Repo{ID: id, Files: files}
}

func testClient(t *testing.T, srv *hubtest.Server) (*Client, *bytes.Buffer) {
	t.Helper()
	log := &bytes.Buffer{}
	return &Client{Endpoint: srv.URL, CacheDir: t.TempDir(), HTTP: srv.Hub.Client(), Log: log,
		Retries: 5, LockTimeout: 10 * time.Second, HeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second}, log
}

// rangeRequests lists the Range headers the server saw for path.
func rangeRequests(srv *hubtest.Server, suffix string) []string {
	var out []string
	for _, r := range srv.Requests() {
		if r.Method == "GET" && strings.HasSuffix(r.Path, suffix) && r.Range != "" {
			out = append(out, r.Range)
		}
	}
	return out
}

func TestDownloadCleanIntoCacheLayout(t *testing.T) {
	repo := tinyRepo(t, "org/tiny")
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	c, _ := testClient(t, srv)
	c.Token = "hf_public" // a token must reach the hub but never the CDN

	res, err := c.Download(context.Background(), "org/tiny", Options{})
	require.NoError(t, err)
	storage := filepath.Join(c.CacheDir, "models--org--tiny")
	assert.Equal(t, filepath.Join(storage, "snapshots", repo.Commit), res.Dir)

	want := []string{"chat_template.jinja", "config.json", "generation_config.json", shard1,
		"model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}
	var got []string
	for _, f := range res.Files {
		got = append(got, f.Path)
		assert.Equal(t, StatusDownloaded, f.Status, f.Path)
	}
	assert.ElementsMatch(t, want, got, "the default set: no README, no vision preprocessor configs")
	for _, name := range want {
		data := repo.Files[name]
		etag := hubtest.GitBlobSHA1(data)
		if hubtest.IsLFS(name) {
			etag = hubtest.SHA256(data)
		}
		link, err := os.Readlink(filepath.Join(res.Dir, name))
		require.NoError(t, err, name)
		assert.Equal(t, "../../blobs/"+etag, link, "a relative symlink into blobs/, named by etag")
		blob, err := os.ReadFile(filepath.Join(storage, "blobs", etag))
		require.NoError(t, err)
		assert.Equal(t, data, blob, name)
		assert.FileExists(t, filepath.Join(c.CacheDir, ".locks", "models--org--tiny", etag+".lock"))
		assert.NoFileExists(t, filepath.Join(storage, "blobs", etag+".incomplete"))
	}
	assert.NoFileExists(t, filepath.Join(res.Dir, "preprocessor_config.json"))
	ref, err := os.ReadFile(filepath.Join(storage, "refs", "main"))
	require.NoError(t, err)
	assert.Equal(t, repo.Commit, string(ref), "refs/main holds the bare hash, as huggingface_hub writes it")

	snap, err := Resolve(c.CacheDir, "org/tiny", "main")
	require.NoError(t, err)
	assert.Equal(t, res.Dir, snap)

	for _, r := range srv.Requests() {
		if r.Host == strings.TrimPrefix(srv.CDN.URL, "http://") {
			assert.Empty(t, r.Authorization, "the token went to the CDN: %s", r.Path)
		} else {
			assert.Equal(t, "Bearer hf_public", r.Authorization, r.Path)
		}
	}

	// A second run finds everything cached and fetches nothing.
	before := len(srv.Requests())
	res, err = c.Download(context.Background(), "org/tiny", Options{})
	require.NoError(t, err)
	for _, f := range res.Files {
		assert.Equal(t, StatusCached, f.Status, f.Path)
	}
	assert.Len(t, srv.Requests(), before+1, "only the listing")
}

func TestDownloadResumesACutTransfer(t *testing.T) {
	repo := tinyRepo(t, "org/tiny")
	repo.CutAfter = map[string]int64{shard1: 100000}
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	c, log := testClient(t, srv)

	res, err := c.Download(context.Background(), "org/tiny", Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"bytes=100000-"}, rangeRequests(srv, "/blobs/"+hubtest.SHA256(repo.Files[shard1])))
	assert.Contains(t, log.String(), "resuming")
	data, err := os.ReadFile(filepath.Join(res.Dir, shard1))
	require.NoError(t, err)
	assert.Equal(t, repo.Files[shard1], data)
}

func TestDownloadResumesAcrossRuns(t *testing.T) {
	repo := tinyRepo(t, "org/tiny")
	repo.CutAfter = map[string]int64{shard1: 123456}
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	c, _ := testClient(t, srv)
	c.Retries = 0

	_, err := c.Download(context.Background(), "org/tiny", Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "run the same command again to resume")
	storage := filepath.Join(c.CacheDir, "models--org--tiny")
	partial := filepath.Join(storage, "blobs", hubtest.SHA256(repo.Files[shard1])+".incomplete")
	st, err := os.Stat(partial)
	require.NoError(t, err)
	assert.Equal(t, int64(123456), st.Size())
	assert.NoFileExists(t, filepath.Join(storage, "refs", "main"), "no ref to a half snapshot")
	_, err = Resolve(c.CacheDir, "org/tiny", "main")
	var nc *NotCachedError
	assert.ErrorAs(t, err, &nc)

	res, err := c.Download(context.Background(), "org/tiny", Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"bytes=123456-"}, rangeRequests(srv, "/blobs/"+hubtest.SHA256(repo.Files[shard1])))
	for _, f := range res.Files {
		if f.Path == shard1 {
			assert.Equal(t, StatusResumed, f.Status)
		}
	}
	data, err := os.ReadFile(filepath.Join(res.Dir, shard1))
	require.NoError(t, err)
	assert.Equal(t, repo.Files[shard1], data)
}

func TestDownloadCatchesCorruption(t *testing.T) {
	for _, name := range []string{"model-00002-of-00002.safetensors", "config.json"} {
		t.Run(name, func(t *testing.T) {
			repo := tinyRepo(t, "org/tiny")
			repo.Corrupt = map[string]bool{name: true}
			srv := hubtest.NewServer(repo)
			defer srv.Close()
			c, _ := testClient(t, srv)
			_, err := c.Download(context.Background(), "org/tiny", Options{})
			require.Error(t, err)
			kind := "git blob sha1"
			etag := hubtest.GitBlobSHA1(repo.Files[name])
			if hubtest.IsLFS(name) {
				kind, etag = "sha256", hubtest.SHA256(repo.Files[name])
			}
			assert.Contains(t, err.Error(), name+": "+kind)
			assert.Contains(t, err.Error(), "corrupt")
			storage := filepath.Join(c.CacheDir, "models--org--tiny")
			assert.NoFileExists(t, filepath.Join(storage, "blobs", etag))
			assert.NoFileExists(t, filepath.Join(storage, "blobs", etag+".incomplete"))
			assert.NoFileExists(t, filepath.Join(storage, "refs", "main"))
		})
	}
}

func TestDownloadGatedRepo(t *testing.T) {
	repo := tinyRepo(t, "org/gated")
	repo.Gated, repo.Token = true, "hf_good"
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	t.Setenv("HF_TOKEN_PATH", filepath.Join(t.TempDir(), "token"))
	c, _ := testClient(t, srv)

	_, err := c.Download(context.Background(), "org/gated", Options{})
	var he *HTTPError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, 401, he.Status)
	assert.Contains(t, err.Error(), "org/gated is a gated repository (HTTP 401 GatedRepo")
	assert.Contains(t, err.Error(), "Accept its terms at "+srv.URL+"/org/gated")
	assert.Contains(t, err.Error(), "set HF_TOKEN")
	assert.Contains(t, err.Error(), "no token is set")

	c.Token, c.TokenSource = "hf_bad", "HF_TOKEN"
	_, err = c.Download(context.Background(), "org/gated", Options{})
	require.ErrorAs(t, err, &he)
	assert.Equal(t, 403, he.Status)
	assert.Contains(t, err.Error(), "the token from HF_TOKEN has access")

	c.Token = "hf_good"
	res, err := c.Download(context.Background(), "org/gated", Options{})
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(res.Dir, "config.json"))
}

func TestDownloadMissingRevisionAndRepo(t *testing.T) {
	srv := hubtest.NewServer(tinyRepo(t, "org/tiny"))
	defer srv.Close()
	c, _ := testClient(t, srv)
	_, err := c.Download(context.Background(), "org/tiny", Options{Revision: "nosuch"})
	var he *HTTPError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, 404, he.Status)
	assert.Equal(t, `revision "nosuch" does not exist in org/tiny (HTTP 404 RevisionNotFound: Invalid rev id: nosuch); pick a branch, tag or commit the repository has`, err.Error())

	_, err = c.Download(context.Background(), "org/absent", Options{})
	require.ErrorAs(t, err, &he)
	assert.Contains(t, err.Error(), "org/absent was not found, or it is private or gated")
	_, err = os.Stat(filepath.Join(c.CacheDir, "models--org--absent"))
	assert.True(t, errors.Is(err, os.ErrNotExist), "nothing written for a failed listing")
}

func TestDownloadOffline(t *testing.T) {
	srv := hubtest.NewServer(tinyRepo(t, "org/tiny"))
	defer srv.Close()
	c, _ := testClient(t, srv)
	c.Offline = true
	_, err := c.Download(context.Background(), "org/tiny", Options{})
	assert.ErrorIs(t, err, ErrOffline)
	assert.Contains(t, err.Error(), "HF_HUB_OFFLINE is set")
	assert.Empty(t, srv.Requests())

	t.Setenv("HF_HUB_OFFLINE", "1")
	assert.True(t, NewClient().Offline)
}

func TestDownloadIncludeAndLocalDir(t *testing.T) {
	repo := tinyRepo(t, "org/tiny")
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	c, _ := testClient(t, srv)
	dir := filepath.Join(t.TempDir(), "local")

	res, err := c.Download(context.Background(), "org/tiny", Options{LocalDir: dir, Include: []string{"*.json", "README.md"}})
	require.NoError(t, err)
	assert.Equal(t, dir, res.Dir)
	var names []string
	for _, f := range res.Files {
		names = append(names, f.Path)
	}
	assert.ElementsMatch(t, []string{"config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
		"tokenizer_config.json", "preprocessor_config.json", "video_preprocessor_config.json", "README.md"}, names)
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	assert.Equal(t, repo.Files["config.json"], data)
	st, err := os.Lstat(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	assert.True(t, st.Mode().IsRegular(), "a plain file, not a link")
	meta, err := os.ReadFile(filepath.Join(dir, ".cache", "huggingface", "download", "config.json.metadata"))
	require.NoError(t, err)
	lines := strings.Split(string(meta), "\n")
	require.Len(t, lines, 4)
	assert.Equal(t, repo.Commit, lines[0])
	assert.Equal(t, hubtest.GitBlobSHA1(repo.Files["config.json"]), lines[1])
	assert.FileExists(t, filepath.Join(dir, ".cache", "huggingface", ".gitignore"))
	assert.NoDirExists(t, filepath.Join(c.CacheDir, "models--org--tiny"), "--local-dir leaves the cache alone")

	res, err = c.Download(context.Background(), "org/tiny", Options{LocalDir: dir, Include: []string{"*.json", "README.md"}})
	require.NoError(t, err)
	for _, f := range res.Files {
		assert.Equal(t, StatusCached, f.Status, f.Path)
	}

	// Without metadata a file is trusted only when its hash matches: the
	// intact one is kept, the altered one fetched again.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, ".cache")))
	altered := bytes.ToUpper(repo.Files["README.md"])
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), altered, 0o644))
	res, err = c.Download(context.Background(), "org/tiny", Options{LocalDir: dir, Include: []string{"config.json", "README.md"}})
	require.NoError(t, err)
	status := map[string]FileStatus{}
	for _, f := range res.Files {
		status[f.Path] = f.Status
	}
	assert.Equal(t, map[string]FileStatus{"config.json": StatusCached, "README.md": StatusDownloaded}, status)
	data, err = os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	assert.Equal(t, repo.Files["README.md"], data)

	_, err = c.Download(context.Background(), "org/tiny", Options{Include: []string{"*.gguf"}})
	assert.ErrorContains(t, err, "no file of org/tiny@")
}

func TestDownloadWaitsForTheLock(t *testing.T) {
	repo := tinyRepo(t, "org/tiny")
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	c, _ := testClient(t, srv)
	c.LockTimeout = 300 * time.Millisecond
	lockPath := filepath.Join(c.CacheDir, ".locks", "models--org--tiny", hubtest.GitBlobSHA1(repo.Files["chat_template.jinja"])+".lock")
	require.NoError(t, os.MkdirAll(filepath.Dir(lockPath), 0o755))
	held, err := acquireLock(context.Background(), lockPath, 0, nil)
	require.NoError(t, err)
	_, err = c.Download(context.Background(), "org/tiny", Options{})
	assert.ErrorContains(t, err, lockPath+" is held by another download")
	held.release()
	_, err = c.Download(context.Background(), "org/tiny", Options{})
	assert.NoError(t, err)
}

func TestDiskSpaceCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	tg := cacheTarget(dir, filepath.Join(dir, "models--org--big"), strings.Repeat("a", 40),
		RepoFile{Path: "model.safetensors", Size: 1 << 50, SHA256: strings.Repeat("b", 64)})
	err := checkDiskSpace(missingBytes([]*target{tg}), []*target{tg}, dir)
	require.Error(t, err)
	need := int64(1 << 50)
	assert.Contains(t, err.Error(), fmt.Sprintf("GB free but the download needs %.1f GB more (its size and a margin", float64(need+need/100+16<<20)/1e9))
}

// A server that ignores Range gets the file again from byte 0, and the
// result is still the right file.
func TestDownloadRestartsWhenRangeIsIgnored(t *testing.T) {
	repo := tinyRepo(t, "org/tiny")
	repo.CutAfter = map[string]int64{shard1: 50000}
	repo.IgnoreRange = true
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	c, _ := testClient(t, srv)
	res, err := c.Download(context.Background(), "org/tiny", Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"bytes=50000-"}, rangeRequests(srv, "/blobs/"+hubtest.SHA256(repo.Files[shard1])))
	data, err := os.ReadFile(filepath.Join(res.Dir, shard1))
	require.NoError(t, err)
	assert.Equal(t, repo.Files[shard1], data)
}

// A renamed repository answers with a same-host redirect, which is
// followed (with the token); the files land under the name asked for.
func TestDownloadFollowsARenamedRepo(t *testing.T) {
	repo := tinyRepo(t, "org/new")
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	srv.Rename("org/old", "org/new")
	c, _ := testClient(t, srv)
	c.Token = "hf_x"
	res, err := c.Download(context.Background(), "org/old", Options{})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(c.CacheDir, "models--org--old", "snapshots", repo.Commit), res.Dir)
	redirected := 0
	for _, r := range srv.Requests() {
		if r.Method == "HEAD" && strings.HasPrefix(r.Path, "/org/new/resolve/") {
			redirected++
			assert.Equal(t, "Bearer hf_x", r.Authorization)
		}
	}
	assert.Equal(t, len(res.Files), redirected, "one redirected HEAD per file")
}
