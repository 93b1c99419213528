package hub

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qwenref/qwenref/hub/hubtest"
	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// within runs fn and fails the test if it takes longer than d (a hang
// the code under test should have cut). fn keeps running in the
// background then; the fake hub's Close ends its requests.
func within(t *testing.T, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still running after %v: blocked on a hostile input", d)
	}
}

// noControls fails if a message could move the cursor or forge a line.
func noControls(t *testing.T, msg string) {
	t.Helper()
	for _, r := range msg {
		if r < 0x20 || r == 0x7f || r == '\u202e' {
			t.Fatalf("message carries a raw control or bidi character %U: %q", r, msg)
		}
	}
}

// A file name from the listing that could plant a git config, forge the
// local dir's own records, leave the folder or rewrite the terminal is
// refused before anything is written, and shown escaped.
func TestDownloadRefusesHostileNames(t *testing.T) {
	for _, bad := range []string{
		".git/config", "sub/.git/hooks/pre-commit", ".GIT/config", ".git./config", "git~1/config",
		".cache/huggingface/download/config.json.metadata", ".Cache/HuggingFace/x", ".cache/huggingface",
		"evil\x1b]0;title\x07.json", "a\rb.json", "x\n  downloaded   1.0 kB  forged.json", "bidi\u202enosj.txt",
		"../escape.json", "/abs.json", `a\b.json`, "a//b.json", "./a.json", "a/./b.json", "",
	} {
		t.Run(safeio.Clean(bad), func(t *testing.T) {
			srv := hubtest.NewServer(&hubtest.Repo{ID: "org/evil", Files: map[string][]byte{"config.json": []byte("{}"), bad: []byte("[core]\n\tfsmonitor = touch /tmp/pwned\n")}})
			defer srv.Close()
			c, _ := testClient(t, srv)
			dir := filepath.Join(t.TempDir(), "local")
			_, err := c.Download(context.Background(), "org/evil", Options{LocalDir: dir, Include: []string{"*"}})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "file name "+safeio.Quote(bad))
			noControls(t, err.Error())
			assert.NoDirExists(t, dir, "nothing written for a refused listing")
			_, err = c.Download(context.Background(), "org/evil", Options{Include: []string{"*"}})
			require.Error(t, err)
			assert.NoDirExists(t, filepath.Join(c.CacheDir, "models--org--evil"))
		})
	}
}

// Names that look close to the refused ones but are harmless pass.
func TestValidateRepoPathAccepts(t *testing.T) {
	for _, ok := range []string{".gitattributes", ".github/workflows/ci.yml", "sub/.gitkeep", ".cache/other", "cache/huggingface/x",
		"模型/config.json", "with space.json", "a/b/c.safetensors", "a.git/x", "x.git"} {
		assert.NoError(t, validateRepoPath(ok), ok)
	}
	assert.Error(t, validateRepoPath(strings.Repeat("a", maxPathBytes+1)))
}

// A listing that names a file twice is refused.
func TestParseListingRefusesDuplicates(t *testing.T) {
	sib := `{"rfilename": "config.json", "size": 2, "blobId": "` + strings.Repeat("a", 40) + `"}`
	_, err := parseListing([]byte(`{"sha": "`+strings.Repeat("b", 40)+`", "siblings": [`+sib+`, `+sib+`]}`), "org/x", "main", "u")
	assert.ErrorContains(t, err, "config.json is listed twice")
}

// A server that never sends the listing's headers, one that stops after
// them, and one that never answers a resolve request are each given up
// on within the header or idle timeout (the one limit under test is
// short, the others are generous), naming the server and the stall.
func TestDownloadGivesUpOnSilentServers(t *testing.T) {
	for name, c := range map[string]struct {
		repo   func(*hubtest.Repo)
		limits func(*Client)
		want   string
	}{
		"listing headers": {func(r *hubtest.Repo) { r.Silent = map[string]bool{"": true} }, func(c *Client) { c.HeaderTimeout = 100 * time.Millisecond },
			"listing org/tiny@main at http://"},
		"listing body": {func(r *hubtest.Repo) { r.StallListing = true }, func(c *Client) { c.IdleTimeout = 100 * time.Millisecond },
			"listing org/tiny@main: "},
		"resolve headers": {func(r *hubtest.Repo) { r.Silent = map[string]bool{"config.json": true} }, func(c *Client) { c.HeaderTimeout = 250 * time.Millisecond },
			"config.json of org/tiny: "},
	} {
		t.Run(name, func(t *testing.T) {
			repo := tinyRepo(t, "org/tiny")
			c.repo(repo)
			srv := hubtest.NewServer(repo)
			defer srv.Close()
			cl, _ := testClient(t, srv)
			c.limits(cl)
			var err error
			start := time.Now()
			within(t, 10*time.Second, func() { _, err = cl.Download(context.Background(), "org/tiny", Options{}) })
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			stall := "sent no response headers within " + cl.HeaderTimeout.String() + " (limit set by " + EnvHeaderTimeout
			if name == "listing body" {
				stall = "sent nothing for 100ms (limit set by " + EnvIdleTimeout
			}
			assert.Contains(t, err.Error(), strings.TrimPrefix(srv.URL, "http://")+" "+stall, "the message names the server and the stall")
			assert.Less(t, time.Since(start), 5*time.Second)
		})
	}
}

// A body that drips a byte every 20 ms never trips the idle timeout but
// is far below 1000 bytes/s over 100 ms: it is cut, retried, and given up
// on, leaving the partial file to resume from.
func TestDownloadGivesUpOnADrip(t *testing.T) {
	repo := tinyRepo(t, "org/tiny")
	repo.Drip = map[string]time.Duration{"config.json": 20 * time.Millisecond}
	srv := hubtest.NewServer(repo)
	defer srv.Close()
	c, _ := testClient(t, srv)
	c.MinRate, c.RateWindow, c.Retries = 1000, 100*time.Millisecond, 1
	var err error
	within(t, 10*time.Second, func() { _, err = c.Download(context.Background(), "org/tiny", Options{}) })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config.json: transfer cut: "+strings.TrimPrefix(srv.URL, "http://")+" sent ")
	assert.Contains(t, err.Error(), "in 100ms, below the minimum of 1.0 kB/s (limit set by "+EnvMinRate+" and "+EnvRateWindow)
	assert.Contains(t, err.Error(), "2 attempts; run the same command again to resume")
	assert.FileExists(t, filepath.Join(c.CacheDir, "models--org--tiny", "blobs", hubtest.GitBlobSHA1(repo.Files["config.json"])+".incomplete"))
}

// A resume the server will not honour (416, or a 206 whose Content-Range
// starts elsewhere) discards the partial file and starts again from byte
// 0 with no Range, instead of failing the same way on every run; a cut
// after that restarts from 0 too.
func TestDownloadRestartsWhenAResumeIsRefused(t *testing.T) {
	for name, c := range map[string]struct {
		fault  func(*hubtest.Repo)
		ranges []string
	}{
		// 416 sends no body, so the cut falls on the first transfer from 0.
		"416": {func(r *hubtest.Repo) { r.RefuseRange = true }, []string{"bytes=100000-", "", ""}},
		// The misplaced 206's body is the one cut (it is not read).
		"wrong Content-Range": {func(r *hubtest.Repo) { r.MisplaceRange = true }, []string{"bytes=100000-", ""}},
	} {
		t.Run(name, func(t *testing.T) {
			repo := tinyRepo(t, "org/tiny")
			c.fault(repo)
			repo.CutAfter = map[string]int64{shard1: 300000}
			srv := hubtest.NewServer(repo)
			defer srv.Close()
			cl, log := testClient(t, srv)
			sum := hubtest.SHA256(repo.Files[shard1])
			blobs := filepath.Join(cl.CacheDir, "models--org--tiny", "blobs")
			require.NoError(t, os.MkdirAll(blobs, 0o755))
			// A partial file whose bytes are not the file's: only a restart from 0 can finish it.
			require.NoError(t, os.WriteFile(filepath.Join(blobs, sum+".incomplete"), make([]byte, 100000), 0o644))
			res, err := cl.Download(context.Background(), "org/tiny", Options{})
			require.NoError(t, err)
			var ranges []string
			for _, r := range srv.Requests() {
				if r.Method == "GET" && strings.HasSuffix(r.Path, "/blobs/"+sum) {
					ranges = append(ranges, r.Range)
				}
			}
			assert.Equal(t, c.ranges, ranges, "one resume, refused; then only from byte 0")
			assert.Contains(t, log.String(), "would not resume at byte 100000")
			data, err := os.ReadFile(filepath.Join(res.Dir, shard1))
			require.NoError(t, err)
			assert.Equal(t, repo.Files[shard1], data)
			for _, f := range res.Files {
				if f.Path == shard1 {
					assert.Equal(t, StatusDownloaded, f.Status)
				}
			}
		})
	}
}

// The limits come from the environment; a malformed value is an error
// naming the variable, returned before any request.
func TestTimeoutsFromEnv(t *testing.T) {
	t.Setenv("HF_TOKEN", "x")
	for _, v := range []string{EnvHeaderTimeout, EnvIdleTimeout, EnvMinRate, EnvRateWindow} {
		t.Setenv(v, "")
	}
	c := NewClient()
	require.NoError(t, c.ConfigErr)
	assert.Equal(t, []any{DefaultHeaderTimeout, DefaultIdleTimeout, int64(DefaultMinRate), DefaultRateWindow},
		[]any{c.HeaderTimeout, c.IdleTimeout, c.MinRate, c.RateWindow})
	t.Setenv(EnvHeaderTimeout, "150ms")
	t.Setenv(EnvIdleTimeout, "0")
	t.Setenv(EnvMinRate, "10")
	t.Setenv(EnvRateWindow, "1m")
	c = NewClient()
	require.NoError(t, c.ConfigErr)
	assert.Equal(t, []any{150 * time.Millisecond, time.Duration(0), int64(10), time.Minute}, []any{c.HeaderTimeout, c.IdleTimeout, c.MinRate, c.RateWindow})
	for v, bad := range map[string]string{EnvHeaderTimeout: "soon", EnvIdleTimeout: "-1s", EnvMinRate: "1.5", EnvRateWindow: "5"} {
		t.Run(v, func(t *testing.T) {
			t.Setenv(v, bad)
			srv := hubtest.NewServer()
			defer srv.Close()
			c := NewClient()
			require.Error(t, c.ConfigErr)
			assert.Contains(t, c.ConfigErr.Error(), v+"=")
			c.Endpoint, c.HTTP = srv.URL, srv.Hub.Client()
			_, err := c.Download(context.Background(), "org/tiny", Options{})
			assert.Equal(t, c.ConfigErr, err)
			assert.Empty(t, srv.Requests())
		})
	}
}

// The idle limit is measured from the last byte: a body that keeps
// trickling under it is not cut; once it stops, it is, within the limit.
func TestBodyGuardIdle(t *testing.T) {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for i := 0; i < 15; i++ {
			_, _ = pw.Write([]byte{'x'})
			time.Sleep(10 * time.Millisecond)
		}
		<-ctx.Done() // then silence, until the guard cancels
		pw.CloseWithError(ctx.Err())
	}()
	resp := &http.Response{Body: pr, Request: &http.Request{URL: &url.URL{Host: "cdn.example:443"}}}
	g := (&Client{IdleTimeout: 50 * time.Millisecond}).guard(resp, cancel)
	defer g.Close()
	start := time.Now()
	n, err := io.Copy(io.Discard, g)
	assert.Equal(t, int64(15), n, "a trickle under the idle limit is not cut")
	var se *StallError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "cdn.example:443 sent nothing for 50ms (limit set by "+EnvIdleTimeout+"; see docs/hub.md)", err.Error())
	assert.Less(t, time.Since(start), 5*time.Second)
}

// A minimum rate whose bytes per window overflow int64 stays a limit
// (it would otherwise convert to a negative need, which turns it off).
func TestBodyGuardHugeMinRate(t *testing.T) {
	g := &bodyGuard{minRate: math.MaxInt64, window: DefaultRateWindow}
	assert.Equal(t, int64(math.MaxInt64), g.windowNeed())
	g = &bodyGuard{minRate: DefaultMinRate, window: DefaultRateWindow}
	assert.Equal(t, int64(DefaultMinRate*120), g.windowNeed())
}

// A revision with control characters is refused, and shown escaped.
func TestParseRefRefusesControls(t *testing.T) {
	for _, ref := range []string{"a/b@main\x1b[2J", "a/b@v1\tx", "a/b@\u202emain"} {
		_, _, err := ParseRef(ref)
		require.Error(t, err, ref)
		noControls(t, err.Error())
	}
}

// A server whose error text echoes the request's Authorization header
// (a misconfigured mirror) does not get the token into the message.
func TestServerEchoOfTheTokenRedacted(t *testing.T) {
	tok := "hf_" + strings.Repeat("Tok3n", 7)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Error-Message", "bad request with Authorization: "+r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer srv.Close()
	c := &Client{Endpoint: srv.URL, Token: tok, CacheDir: t.TempDir(), HTTP: srv.Client(), Log: io.Discard,
		Retries: 1, LockTimeout: time.Second, HeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second}
	_, err := c.Download(context.Background(), "org/tiny", Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Authorization: Bearer hf_***")
	assert.NotContains(t, err.Error(), "Tok3n")
}
