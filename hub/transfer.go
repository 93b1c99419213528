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
	"time"

	"github.com/qwenref/qwenref/internal/safeio"
)

// fetch makes one file present and verified at its target.
func (c *Client) fetch(ctx context.Context, repo, commit string, t *target) (FileStatus, error) {
	if ok, err := t.done(); err != nil || ok {
		return StatusCached, err
	}
	if t.present() {
		status := StatusLinked
		err := c.withLock(ctx, t, func() error {
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
	err = c.withLock(ctx, t, func() error {
		if t.shared && blobReady(t.final, t.file.Size) { // another process finished it
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
		if err := ensureDir(t.root, filepath.Dir(t.final)); err != nil {
			return err
		}
		if err := os.Rename(t.incomplete, t.final); err != nil {
			return err
		}
		return t.publish()
	})
	return status, err
}

// present reports whether the final file is there: for the cache a blob
// of the listed size (named by its hash, so right), for a local dir any
// file (its hash is checked before it is trusted).
func (t *target) present() bool {
	if t.shared {
		return blobReady(t.final, t.file.Size)
	}
	_, err := os.Stat(t.final)
	return err == nil
}

// withLock runs fn holding t's lock file, in a real folder below t.root.
func (c *Client) withLock(ctx context.Context, t *target, fn func() error) error {
	if err := ensureDir(t.root, filepath.Dir(t.lock)); err != nil {
		return err
	}
	l, err := acquireLock(ctx, t.lock, c.LockTimeout, c.Log)
	if err != nil {
		return err
	}
	defer l.release()
	return fn()
}

// hasContent reports whether path has f's size and hash.
func hasContent(path string, f RepoFile) (bool, error) {
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
		return false, nil
	}
	h := newHash(f)
	if _, err := hashFile(path, h); err != nil {
		return false, fmt.Errorf("reading %w", err)
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
		resp, cancel, err := c.send(&noFollow, req)
		if err != nil {
			return "", fmt.Errorf("%s of %s: %w", f.Path, repo, err)
		}
		resp.Body.Close()
		cancel()
		loc := resp.Header.Get("Location")
		if resp.StatusCode >= 300 && resp.StatusCode < 400 && loc != "" {
			rel, err := url.Parse(loc)
			if err != nil {
				return "", fmt.Errorf("%s of %s: bad redirect %s", f.Path, repo, safeio.Quote(loc))
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
		return fmt.Errorf("%s of %s: the hub answered for commit %s, not %s (is HF_ENDPOINT a Hugging Face hub?)", f.Path, repo, safeio.Quote(got), commit)
	}
	etag := h.Get("X-Linked-Etag")
	if etag == "" {
		etag = h.Get("ETag")
	}
	etag = strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
	if etag != f.ETag() {
		return fmt.Errorf("%s of %s: the hub's etag %s disagrees with its listing %q", f.Path, repo, safeio.Quote(etag), f.ETag())
	}
	size := h.Get("X-Linked-Size")
	if size == "" {
		size = h.Get("Content-Length")
	}
	if n, err := strconv.ParseInt(size, 10, 64); err != nil || n != f.Size {
		return fmt.Errorf("%s of %s: the hub's size %s disagrees with its listing (%d bytes)", f.Path, repo, safeio.Quote(size), f.Size)
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

// resetProgress is how far a cut transfer must have gone past its best
// position for its failures to be forgiven: a server that sends a few
// bytes and then stalls or hangs up uses up c.Retries instead.
const resetProgress = 1 << 20

// transfer brings t.incomplete to the full, verified file: it continues a
// partial file with a Range request, resumes again after a cut up to
// c.Retries times, and deletes the partial file when its hash is wrong.
// A resume the server will not honour (a 200, a 416 or a wrong
// Content-Range) discards the partial file once and starts from byte 0;
// later cuts in the same run then start from 0 too.
func (c *Client) transfer(ctx context.Context, repo, loc string, t *target) (resumed bool, err error) {
	if err := ensureDir(t.root, filepath.Dir(t.incomplete)); err != nil {
		return false, err
	}
	out, st, err := openPartial(t.incomplete)
	if err != nil {
		return false, err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	h := newHash(t.file)
	restart := func() error {
		if err := out.Truncate(0); err != nil {
			return err
		}
		_, err := out.Seek(0, io.SeekStart)
		h = newHash(t.file)
		return err
	}
	have := st.Size()
	if have > t.file.Size {
		if err := restart(); err != nil {
			return false, err
		}
		have = 0
	}
	if have > 0 { // hash what an earlier run left, then continue after it
		if _, err := io.Copy(h, io.NewSectionReader(out, 0, have)); err != nil {
			return false, fmt.Errorf("reading %s: %w", safeio.Clean(t.incomplete), err)
		}
		resumed = true
		if c.Log != nil {
			fmt.Fprintf(c.Log, "%s: resuming at %d of %d bytes\n", t.file.Path, have, t.file.Size)
		}
	}
	if _, err := out.Seek(have, io.SeekStart); err != nil {
		return false, err
	}
	failures, best, rangeOK := 0, have, true
	for have < t.file.Size {
		if have > 0 && !rangeOK {
			if err := restart(); err != nil {
				return resumed, err
			}
			have, resumed = 0, false
		}
		got, refusal, err := c.get(ctx, repo, loc, t.file, have, out, h)
		if refusal != "" {
			if c.Log != nil {
				fmt.Fprintf(c.Log, "%s: the server would not resume at byte %d (%s); starting again from byte 0\n", t.file.Path, have, refusal)
			}
			rangeOK = false
			continue
		}
		have += got
		if err == nil {
			continue
		}
		if !errors.Is(err, errCut) || ctx.Err() != nil {
			return resumed, err
		}
		if have >= best+resetProgress {
			failures = 0
		}
		best = max(best, have)
		if failures++; failures > c.Retries {
			return resumed, fmt.Errorf("%s: %w after %d bytes of %d, %d attempts; run the same command again to resume from %s",
				t.file.Path, err, have, t.file.Size, failures, safeio.Clean(t.incomplete))
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
// returns how many arrived, or, reading nothing, why the server did not
// honour a request from offset > 0 (a 200, a 416, another Content-Range).
func (c *Client) get(ctx context.Context, repo, loc string, f RepoFile, offset int64, out io.Writer, h hash.Hash) (int64, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Accept-Encoding", "identity")
	if offset > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	}
	c.authorize(req)
	resp, cancel, err := c.send(c.client(), req)
	if err != nil {
		if ctx.Err() == nil {
			return 0, "", fmt.Errorf("%w: %w", errCut, err)
		}
		return 0, "", err
	}
	body := c.guard(resp, cancel)
	defer body.Close()
	switch {
	case offset > 0 && resp.StatusCode == http.StatusPartialContent:
		if why := checkContentRange(resp.Header.Get("Content-Range"), offset, f.Size); why != "" {
			return 0, why, nil
		}
	case offset > 0 && resp.StatusCode == http.StatusOK:
		return 0, "it answered 200 with the whole file", nil
	case offset > 0 && resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		return 0, "it answered 416 Range Not Satisfiable", nil
	case offset == 0 && resp.StatusCode == http.StatusOK:
	default:
		return 0, "", c.httpError(resp, repo, "", f.Path)
	}
	limit := f.Size - offset
	if resp.ContentLength > limit {
		return 0, "", fmt.Errorf("%s: the server announces %d bytes from byte %d, more than the %d the hub lists", f.Path, resp.ContentLength, offset, f.Size)
	}
	var n int64
	buf := make([]byte, min(1<<20, max(limit, 1)))
	for n < limit {
		k, rerr := body.Read(buf[:min(int64(len(buf)), limit-n)])
		if k > 0 {
			if _, werr := out.Write(buf[:k]); werr != nil {
				return n, "", werr
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
			if ctx.Err() != nil {
				return n, "", ctx.Err()
			}
			return n, "", fmt.Errorf("%w: %w", errCut, rerr)
		}
	}
	if n < limit {
		return n, "", fmt.Errorf("%w: the connection closed early", errCut)
	}
	// Anything beyond the listed size means the file is not what was listed.
	if k, _ := body.Read(buf[:1]); k > 0 {
		return n, "", fmt.Errorf("%s: the server sent more than the %d bytes the hub lists", f.Path, f.Size)
	}
	return n, "", nil
}

// checkContentRange says what is wrong with a 206's Content-Range for a
// request from offset of a file of size bytes ("" when it is right:
// "bytes offset-(size-1)/size", the total may be "*").
func checkContentRange(v string, offset, size int64) string {
	bad := fmt.Sprintf("it answered Content-Range %s to a request from byte %d", safeio.Quote(v), offset)
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return bad
	}
	span, total, ok := strings.Cut(rest, "/")
	if !ok {
		return bad
	}
	first, last, ok := strings.Cut(span, "-")
	if !ok {
		return bad
	}
	a, err1 := strconv.ParseInt(first, 10, 64)
	b, err2 := strconv.ParseInt(last, 10, 64)
	if err1 != nil || err2 != nil || a != offset || b != size-1 {
		return bad
	}
	if total != "*" {
		if n, err := strconv.ParseInt(total, 10, 64); err != nil || n != size {
			return bad
		}
	}
	return ""
}
