package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fetch makes one file present and verified at its target.
func (c *Client) fetch(ctx context.Context, repo, commit string, t *target) (FileStatus, error) {
	if ok, err := t.done(); err != nil || ok {
		return StatusCached, err
	}
	if _, err := os.Stat(t.final); err == nil {
		status := StatusLinked
		err := c.withLock(ctx, t.lock, func() error {
			// A local-dir file without matching metadata is trusted only
			// if its hash is the listed one (as huggingface_hub does).
			if !t.shared {
				if ok, err := hasContent(t.final, t.file); err != nil || !ok {
					status = ""
					return err
				}
				status = StatusCached
			}
			return t.publish()
		})
		if err != nil || status != "" {
			return status, err
		}
	}
	loc, err := c.resolve(ctx, repo, commit, t.file)
	if err != nil {
		return "", err
	}
	status := StatusDownloaded
	err = c.withLock(ctx, t.lock, func() error {
		if _, err := os.Stat(t.final); err == nil && t.shared { // another process finished it
			status = StatusLinked
			return t.publish()
		}
		resumed, err := c.transfer(ctx, repo, loc, t)
		if err != nil {
			return err
		}
		if resumed {
			status = StatusResumed
		}
		if err := os.MkdirAll(filepath.Dir(t.final), 0o755); err != nil {
			return err
		}
		if err := os.Rename(t.incomplete, t.final); err != nil {
			return err
		}
		return t.publish()
	})
	return status, err
}

func (c *Client) withLock(ctx context.Context, path string, fn func() error) error {
	l, err := acquireLock(ctx, path, c.LockTimeout, c.Log)
	if err != nil {
		return err
	}
	defer l.release()
	return fn()
}

// hasContent reports whether path has f's size and hash.
func hasContent(path string, f RepoFile) (bool, error) {
	in, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil || st.Size() != f.Size {
		return false, err
	}
	h := newHash(f)
	if _, err := io.Copy(h, in); err != nil {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)) == f.ETag(), nil
}

// resolve asks the hub where file lives (HEAD /{repo}/resolve/{commit}/{path},
// relative redirects followed, others not) and checks that its headers
// agree with the listing: X-Repo-Commit, X-Linked-Etag (else ETag) and
// X-Linked-Size (else Content-Length). It returns the URL to GET: the
// Location of a redirect (a CDN for LFS files) or the resolve URL.
func (c *Client) resolve(ctx context.Context, repo, commit string, f RepoFile) (string, error) {
	segs := strings.Split(f.Path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	u := c.Endpoint + "/" + repo + "/resolve/" + commit + "/" + strings.Join(segs, "/")
	noFollow := *c.client()
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for hop := 0; ; hop++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("Accept-Encoding", "identity")
		c.authorize(req)
		resp, err := noFollow.Do(req)
		if err != nil {
			return "", fmt.Errorf("%s of %s: %w", f.Path, repo, err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode >= 300 && resp.StatusCode < 400 && loc != "" {
			rel, err := url.Parse(loc)
			if err != nil {
				return "", fmt.Errorf("%s of %s: bad redirect %q", f.Path, repo, truncate(loc, 100))
			}
			target := resp.Request.URL.ResolveReference(rel)
			if rel.Host != "" { // another host (the CDN): the file's real location
				if err := checkHeaders(resp.Header, repo, commit, f); err != nil {
					return "", err
				}
				return target.String(), nil
			}
			if hop >= 5 {
				return "", fmt.Errorf("%s of %s: more than 5 redirects within the hub", f.Path, repo)
			}
			u = target.String() // same host: a renamed repository
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return "", c.httpError(resp, repo, commit, f.Path)
		}
		if err := checkHeaders(resp.Header, repo, commit, f); err != nil {
			return "", err
		}
		return u, nil
	}
}

func checkHeaders(h http.Header, repo, commit string, f RepoFile) error {
	if got := h.Get("X-Repo-Commit"); got != commit {
		return fmt.Errorf("%s of %s: the hub answered for commit %q, not %s (is HF_ENDPOINT a Hugging Face hub?)", f.Path, repo, truncate(got, 60), commit)
	}
	etag := h.Get("X-Linked-Etag")
	if etag == "" {
		etag = h.Get("ETag")
	}
	etag = strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
	if etag != f.ETag() {
		return fmt.Errorf("%s of %s: the hub's etag %q disagrees with its listing %q", f.Path, repo, truncate(etag, 80), f.ETag())
	}
	size := h.Get("X-Linked-Size")
	if size == "" {
		size = h.Get("Content-Length")
	}
	if n, err := strconv.ParseInt(size, 10, 64); err != nil || n != f.Size {
		return fmt.Errorf("%s of %s: the hub's size %q disagrees with its listing (%d bytes)", f.Path, repo, size, f.Size)
	}
	return nil
}

// newHash is the hash the file's etag is: sha256 of the content for LFS
// files, the git blob sha1 ("blob <size>\0" + content) for the others.
func newHash(f RepoFile) hash.Hash {
	if f.SHA256 != "" {
		return sha256.New()
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", f.Size)
	return h
}

// transfer brings t.incomplete to the full, verified file: it continues a
// partial file with a Range request, resumes again after a cut up to
// c.Retries times, and deletes the partial file when its hash is wrong.
func (c *Client) transfer(ctx context.Context, repo, loc string, t *target) (resumed bool, err error) {
	if err := os.MkdirAll(filepath.Dir(t.incomplete), 0o755); err != nil {
		return false, err
	}
	out, err := os.OpenFile(t.incomplete, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return false, err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	st, err := out.Stat()
	if err != nil {
		return false, err
	}
	have := st.Size()
	if have > t.file.Size {
		if err := out.Truncate(0); err != nil {
			return false, err
		}
		have = 0
	}
	h := newHash(t.file)
	if have > 0 { // hash what an earlier run left, then continue after it
		if _, err := io.Copy(h, io.NewSectionReader(out, 0, have)); err != nil {
			return false, fmt.Errorf("reading %s: %w", t.incomplete, err)
		}
		resumed = true
		if c.Log != nil {
			fmt.Fprintf(c.Log, "%s: resuming at %d of %d bytes\n", t.file.Path, have, t.file.Size)
		}
	}
	if _, err := out.Seek(have, io.SeekStart); err != nil {
		return false, err
	}
	failures := 0
	for have < t.file.Size {
		got, restart, err := c.get(ctx, repo, loc, t.file, have, out, h)
		if restart { // the server ignores Range: start again from byte 0
			if err := out.Truncate(0); err != nil {
				return resumed, err
			}
			if _, err := out.Seek(0, io.SeekStart); err != nil {
				return resumed, err
			}
			h, have = newHash(t.file), 0
			continue
		}
		have += got
		if err == nil {
			continue
		}
		if !errors.Is(err, errCut) || ctx.Err() != nil {
			return resumed, err
		}
		if got > 0 {
			failures = 0
		}
		if failures++; failures > c.Retries {
			return resumed, fmt.Errorf("%s: %w after %d bytes of %d, %d attempts; run the same command again to resume from %s",
				t.file.Path, err, have, t.file.Size, failures, t.incomplete)
		}
		resumed = true
		if c.Log != nil {
			fmt.Fprintf(c.Log, "%s: %v at %d of %d bytes; resuming\n", t.file.Path, err, have, t.file.Size)
		}
		select {
		case <-ctx.Done():
			return resumed, ctx.Err()
		case <-time.After(time.Duration(failures) * 200 * time.Millisecond):
		}
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != t.file.ETag() {
		_ = os.Remove(t.incomplete)
		kind := "sha256"
		if t.file.SHA256 == "" {
			kind = "git blob sha1"
		}
		return resumed, fmt.Errorf("%s: %s of the downloaded bytes is %s but the hub lists %s: the file is corrupt and was deleted; run the command again",
			t.file.Path, kind, sum, t.file.ETag())
	}
	return resumed, out.Sync()
}

// get fetches bytes from offset on and appends them to out and h. It
// returns how many arrived, or restart (reading nothing) when a 200
// answered a Range request.
func (c *Client) get(ctx context.Context, repo, loc string, f RepoFile, offset int64, out io.Writer, h hash.Hash) (int64, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	if offset > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	}
	c.authorize(req)
	resp, err := c.client().Do(req)
	if err != nil {
		if ctx.Err() == nil {
			return 0, false, fmt.Errorf("%w: %v", errCut, err)
		}
		return 0, false, err
	}
	defer resp.Body.Close()
	switch {
	case offset > 0 && resp.StatusCode == http.StatusPartialContent:
		if start, ok := contentRangeStart(resp.Header.Get("Content-Range")); !ok || start != offset {
			return 0, false, fmt.Errorf("%s: asked for bytes from %d, the server sent Content-Range %q", f.Path, offset, resp.Header.Get("Content-Range"))
		}
	case resp.StatusCode == http.StatusOK && offset > 0:
		return 0, true, nil
	case resp.StatusCode == http.StatusOK:
	default:
		return 0, false, c.httpError(resp, repo, "", f.Path)
	}
	body := &idleReader{r: resp.Body, cancel: cancel, timeout: c.IdleTimeout}
	defer body.stop()
	limit := f.Size - offset
	var n int64
	buf := make([]byte, 1<<20)
	for n < limit {
		k, rerr := body.Read(buf[:min(int64(len(buf)), limit-n)])
		if k > 0 {
			if _, werr := out.Write(buf[:k]); werr != nil {
				return n, false, werr
			}
			h.Write(buf[:k])
			n += int64(k)
			if c.Progress != nil {
				c.Progress(f.Path, offset+n, f.Size)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if body.idle() {
				return n, false, fmt.Errorf("%w: nothing received for %v", errCut, c.IdleTimeout)
			}
			if ctx.Err() != nil && !body.idle() {
				return n, false, ctx.Err()
			}
			return n, false, fmt.Errorf("%w: %v", errCut, rerr)
		}
	}
	if n < limit {
		return n, false, fmt.Errorf("%w: the connection closed early", errCut)
	}
	// Anything beyond the listed size means the file is not what was listed.
	if k, _ := body.Read(buf[:1]); k > 0 {
		return n, false, fmt.Errorf("%s: the server sent more than the %d bytes the hub lists", f.Path, f.Size)
	}
	return n, false, nil
}

func contentRangeStart(v string) (int64, bool) {
	v, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, false
	}
	start, _, ok := strings.Cut(v, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(start, 10, 64)
	return n, err == nil
}

// idleReader cancels its request when no byte arrives for timeout, so a
// stalled connection ends instead of blocking forever.
type idleReader struct {
	r       io.Reader
	cancel  func()
	timeout time.Duration
	mu      sync.Mutex
	timer   *time.Timer
	fired   bool
}

// Read restarts the idle timer and reads from the body.
func (r *idleReader) Read(p []byte) (int, error) {
	if r.timeout > 0 {
		r.mu.Lock()
		if r.timer == nil {
			r.timer = time.AfterFunc(r.timeout, func() {
				r.mu.Lock()
				r.fired = true
				r.mu.Unlock()
				r.cancel()
			})
		} else {
			r.timer.Reset(r.timeout)
		}
		r.mu.Unlock()
	}
	return r.r.Read(p)
}

func (r *idleReader) idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fired
}

func (r *idleReader) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
}
