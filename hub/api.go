package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/qwenref/qwenref/internal/safeio"
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
	// HeaderTimeout bounds connecting and waiting for the response headers
	// of each request (0: no bound).
	HeaderTimeout time.Duration
	// IdleTimeout cuts a response body (the listing, a file) that sends
	// nothing for this long (0: no bound). A cut file is resumed.
	IdleTimeout time.Duration
	// MinRate and RateWindow cut a response body that brings fewer than
	// MinRate bytes per second over a RateWindow (either 0: no bound), so
	// a server dripping a byte now and then is given up on too.
	MinRate    int64
	RateWindow time.Duration
	// ConfigErr is what NewClient found wrong in the environment (a
	// malformed QWENREF_HUB_* limit, a token file that is a FIFO or too
	// large); Info and Download return it before any request.
	ConfigErr error
}

// NewClient reads HF_ENDPOINT, HF_TOKEN / the token file, HF_HUB_CACHE /
// HF_HOME and HF_HUB_OFFLINE.
//
// It also reads the limits on a slow server: QWENREF_HUB_HEADER_TIMEOUT,
// QWENREF_HUB_IDLE_TIMEOUT, QWENREF_HUB_RATE_WINDOW (Go durations) and
// QWENREF_HUB_MIN_RATE (bytes per second), each defaulting to the
// Default* constant. A malformed value, or a token file qwenref refuses
// to read, is kept in ConfigErr.
func NewClient() *Client {
	tok, src, tokErr := ReadToken()
	ep := strings.TrimRight(os.Getenv("HF_ENDPOINT"), "/")
	if ep == "" {
		ep = DefaultEndpoint
	}
	c := &Client{
		Endpoint: ep, Token: tok, TokenSource: src, CacheDir: CacheDir(), Offline: Offline(),
		HTTP:    defaultHTTPClient(),
		Retries: 5, LockTimeout: time.Hour,
	}
	c.ConfigErr = c.timeoutsFromEnv()
	if c.ConfigErr == nil {
		c.ConfigErr = tokErr
	}
	return c
}

// defaultHTTPClient bounds connecting, never the body (checkpoints take
// long); the Client's own limits bound the headers and a slow body.
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

// Info lists repo at revision with sizes and hashes:
// GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true.
func (c *Client) Info(ctx context.Context, repo, revision string) (*RepoInfo, error) {
	if c.Offline {
		return nil, ErrOffline
	}
	if c.ConfigErr != nil {
		return nil, c.ConfigErr
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
	resp, cancel, err := c.send(c.client(), req)
	if err != nil {
		return nil, fmt.Errorf("listing %s@%s at %s: %w (check the network, a proxy in HTTPS_PROXY, or HF_ENDPOINT)", repo, revision, safeio.Clean(c.Endpoint), err)
	}
	body := c.guard(resp, cancel)
	defer body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.httpError(resp, repo, revision, "")
	}
	data, err := io.ReadAll(io.LimitReader(body, maxInfoBytes+1))
	if err != nil {
		return nil, fmt.Errorf("listing %s@%s: %w", repo, revision, err)
	}
	return parseListing(data, repo, revision, u)
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
	// The headers come from the server: shown escaped and cut short.
	e := &HTTPError{Status: resp.StatusCode, Code: safeio.Clean(resp.Header.Get("X-Error-Code")),
		Message: safeio.Clean(resp.Header.Get("X-Error-Message")), URL: safeio.Clean(resp.Request.URL.String())}
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
		e.text = fmt.Sprintf("%s is a gated repository (%s). Accept its terms at %s/%s, then %s", repo, hubSays, safeio.Clean(c.Endpoint), repo, c.tokenHint())
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
