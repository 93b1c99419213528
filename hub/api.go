package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"
)

// DefaultEndpoint is the public hub.
const DefaultEndpoint = "https://huggingface.co"

// Client downloads from a hub into a cache. NewClient fills it from the
// environment as huggingface_hub does; tests point Endpoint at a fake hub.
type Client struct {
	Endpoint    string // HF_ENDPOINT, default DefaultEndpoint
	Token       string // sent as "Authorization: Bearer" to Endpoint's host only
	TokenSource string // where Token came from, for error messages
	CacheDir    string // the hub cache (CacheDir())
	Offline     bool   // HF_HUB_OFFLINE: refuse every request
	HTTP        *http.Client
	// Log receives notes (resumes, retries, lock waits); nil keeps quiet.
	Log io.Writer
	// Progress is called as bytes of a file arrive; nil for none.
	Progress func(file string, done, total int64)
	// Retries is how many times a cut transfer is resumed in one run.
	Retries int
	// LockTimeout bounds the wait for another process's lock (0: no bound).
	LockTimeout time.Duration
	// IdleTimeout cancels a transfer that sends nothing for this long.
	IdleTimeout time.Duration
}

// NewClient reads HF_ENDPOINT, HF_TOKEN / the token file, HF_HUB_CACHE /
// HF_HOME and HF_HUB_OFFLINE.
func NewClient() *Client {
	tok, src := Token()
	ep := strings.TrimRight(os.Getenv("HF_ENDPOINT"), "/")
	if ep == "" {
		ep = DefaultEndpoint
	}
	return &Client{
		Endpoint: ep, Token: tok, TokenSource: src, CacheDir: CacheDir(), Offline: Offline(),
		HTTP:    defaultHTTPClient(),
		Retries: 5, LockTimeout: time.Hour, IdleTimeout: 2 * time.Minute,
	}
}

// defaultHTTPClient bounds connecting and waiting for headers, never the
// body (checkpoints take long); a stalled body is cut by IdleTimeout.
func defaultHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   30 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			MaxIdleConnsPerHost:   4,
		},
	}
}

// fallbackHTTP serves a Client whose HTTP field was left nil.
var fallbackHTTP = sync.OnceValue(defaultHTTPClient)

func (c *Client) client() *http.Client {
	if c.HTTP == nil {
		return fallbackHTTP()
	}
	return c.HTTP
}

// RepoFile is one file of a repository at a commit, as the hub lists it.
type RepoFile struct {
	Path   string // path in the repository, '/'-separated
	Size   int64  // bytes of the real content (for LFS, not the pointer)
	BlobID string // git blob sha1 (of the pointer, for LFS files)
	SHA256 string // LFS content sha256; empty for regular git files
}

// ETag is the name huggingface_hub gives the file's blob: the sha256 for
// LFS files, the git blob sha1 for the others.
func (f RepoFile) ETag() string {
	if f.SHA256 != "" {
		return f.SHA256
	}
	return f.BlobID
}

// RepoInfo is a repository at one commit.
type RepoInfo struct {
	Repo, Commit string
	Files        []RepoFile
}

// ErrOffline is returned for any request while HF_HUB_OFFLINE is set.
var ErrOffline = errors.New("HF_HUB_OFFLINE is set, so the hub is not contacted; unset it to download " +
	"(reading a model already in the cache, `qwenref run --model org/name`, works offline)")

const (
	maxInfoBytes = 64 << 20
	maxFiles     = 200000
	maxFileSize  = 1 << 42
)

var (
	hex40 = regexp.MustCompile(`^[0-9a-f]{40}$`)
	hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Info lists repo at revision with sizes and hashes:
// GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true.
func (c *Client) Info(ctx context.Context, repo, revision string) (*RepoInfo, error) {
	if c.Offline {
		return nil, ErrOffline
	}
	if err := ValidateRepoID(repo); err != nil {
		return nil, err
	}
	if err := validateRevision(revision); err != nil {
		return nil, err
	}
	u := c.Endpoint + "/api/models/" + repo + "/revision/" + url.PathEscape(revision) + "?blobs=true"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	c.authorize(req)
	resp, err := c.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("listing %s@%s at %s: %w (check the network, a proxy in HTTPS_PROXY, or HF_ENDPOINT)", repo, revision, c.Endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.httpError(resp, repo, revision, "")
	}
	var raw struct {
		ID       string `json:"id"`
		SHA      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
			Size      *int64 `json:"size"`
			BlobID    string `json:"blobId"`
			LFS       *struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			} `json:"lfs"`
		} `json:"siblings"`
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxInfoBytes+1))
	if err != nil {
		return nil, fmt.Errorf("listing %s@%s: %w", repo, revision, err)
	}
	if len(data) > maxInfoBytes {
		return nil, fmt.Errorf("listing %s@%s: the hub's answer is over %d MiB", repo, revision, maxInfoBytes>>20)
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("listing %s@%s: %s did not answer with a repository listing: %v", repo, revision, u, err)
	}
	if !hex40.MatchString(raw.SHA) {
		return nil, fmt.Errorf("listing %s@%s: commit %q is not a 40-hex hash", repo, revision, truncate(raw.SHA, 60))
	}
	if len(raw.Siblings) > maxFiles {
		return nil, fmt.Errorf("listing %s@%s: %d files, more than the %d qwenref accepts", repo, revision, len(raw.Siblings), maxFiles)
	}
	info := &RepoInfo{Repo: repo, Commit: raw.SHA}
	for _, s := range raw.Siblings {
		f := RepoFile{Path: s.RFilename, BlobID: s.BlobID}
		if err := validateRepoPath(f.Path); err != nil {
			return nil, fmt.Errorf("listing %s@%s: %v", repo, revision, err)
		}
		if s.Size == nil {
			return nil, fmt.Errorf("listing %s@%s: %s has no size (the hub was asked for blobs=true)", repo, revision, f.Path)
		}
		f.Size = *s.Size
		if s.LFS != nil {
			f.SHA256, f.Size = s.LFS.SHA256, s.LFS.Size
			if !hex64.MatchString(f.SHA256) {
				return nil, fmt.Errorf("listing %s@%s: %s: LFS sha256 %q is not 64 hex digits", repo, revision, f.Path, truncate(f.SHA256, 80))
			}
		} else if !hex40.MatchString(f.BlobID) {
			return nil, fmt.Errorf("listing %s@%s: %s: blob id %q is not 40 hex digits", repo, revision, f.Path, truncate(f.BlobID, 60))
		}
		if f.Size < 0 || f.Size > maxFileSize {
			return nil, fmt.Errorf("listing %s@%s: %s: size %d out of range", repo, revision, f.Path, f.Size)
		}
		info.Files = append(info.Files, f)
	}
	return info, nil
}

// validateRepoPath rejects file names that could leave the snapshot.
func validateRepoPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\\x00") || path.Clean(p) != p || len(p) > 4096 {
		return fmt.Errorf("file name %q is not a clean relative path", truncate(p, 100))
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." || part == "." {
			return fmt.Errorf("file name %q is not a clean relative path", truncate(p, 100))
		}
	}
	return nil
}

// authorize adds the token to requests for the hub's own host only, so
// it never reaches a CDN that a resolve URL redirects to.
func (c *Client) authorize(req *http.Request) {
	if c.Token == "" {
		return
	}
	if ep, err := url.Parse(c.Endpoint); err == nil && ep.Host == req.URL.Host {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
}

// HTTPError is a refusal from the hub, with its X-Error-Code.
type HTTPError struct {
	Status        int
	Code, Message string // X-Error-Code and X-Error-Message headers
	URL           string
	text          string
}

// Error says what the hub refused and what to do about it.
func (e *HTTPError) Error() string { return e.text }

// httpError turns a failed response into a message that says what to do.
func (c *Client) httpError(resp *http.Response, repo, revision, file string) error {
	e := &HTTPError{Status: resp.StatusCode, Code: resp.Header.Get("X-Error-Code"),
		Message: resp.Header.Get("X-Error-Message"), URL: resp.Request.URL.String()}
	what := repo
	if revision != "" {
		what += "@" + revision
	}
	if file != "" {
		what = file + " of " + what
	}
	hubSays := fmt.Sprintf("HTTP %d", e.Status)
	if e.Code != "" {
		hubSays += " " + e.Code
	}
	if e.Message != "" {
		hubSays += ": " + e.Message
	}
	switch {
	case e.Code == "RevisionNotFound":
		e.text = fmt.Sprintf("revision %q does not exist in %s (%s); pick a branch, tag or commit the repository has", revision, repo, hubSays)
	case e.Code == "EntryNotFound":
		e.text = fmt.Sprintf("%s: no such file on the hub (%s)", what, hubSays)
	case e.Code == "GatedRepo":
		e.text = fmt.Sprintf("%s is a gated repository (%s). Accept its terms at %s/%s, then %s", repo, hubSays, c.Endpoint, repo, c.tokenHint())
	case e.Code == "RepoNotFound" || e.Status == http.StatusUnauthorized:
		e.text = fmt.Sprintf("%s was not found, or it is private or gated and needs a token (%s); check the name, then %s", repo, hubSays, c.tokenHint())
	case e.Status == http.StatusForbidden:
		e.text = fmt.Sprintf("%s: access denied (%s); %s", what, hubSays, c.tokenHint())
	case e.Status == http.StatusTooManyRequests || e.Status >= 500:
		e.text = fmt.Sprintf("%s: the hub is busy or down (%s); try again later", what, hubSays)
	default:
		e.text = fmt.Sprintf("%s: %s from %s", what, hubSays, e.URL)
	}
	return e
}

func (c *Client) tokenHint() string {
	if c.Token == "" {
		return fmt.Sprintf("set HF_TOKEN or log in with `hf auth login` (which writes %s); no token is set now", TokenPath())
	}
	return fmt.Sprintf("check that the token from %s has access to it (it was sent and refused)", c.TokenSource)
}
