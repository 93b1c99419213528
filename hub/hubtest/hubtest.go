// Package hubtest is an in-process fake of the Hugging Face hub's file API
// on loopback (net/http/httptest), for testing downloads without the
// network: the repository listing, resolve URLs with the hub's headers,
// LFS files redirected to a separate CDN host, gated repositories, and
// injected faults (a transfer cut mid-file, corrupted bytes, refused or
// misplaced ranges, silent, stalled and dripping answers). File names
// are served as given, so a test can list hostile ones.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Repo is one repository the fake hub serves.
type Repo struct {
	ID        string            // org/name
	Files     map[string][]byte // path → content at Commit
	Revisions map[string]string // branch or tag → commit; "main" → Commit when nil
	Commit    string            // 40-hex; derived from the files when empty
	Gated     bool              // files need "Authorization: Bearer " + Token
	Token     string
	// CutAfter cuts the first transfer of a file after this many bytes.
	CutAfter map[string]int64
	// Corrupt serves these files with one byte flipped (same size).
	Corrupt map[string]bool
	// IgnoreRange answers Range requests with the whole file (200), as
	// some proxies do.
	IgnoreRange bool
	// RefuseRange answers every Range request 416 Range Not Satisfiable.
	RefuseRange bool
	// MisplaceRange answers a Range request 206 with the whole file and a
	// Content-Range saying it starts at byte 0.
	MisplaceRange bool
	// Silent names requests that get no answer at all, not even headers,
	// until the client gives up: "" is the listing, a path its resolve
	// request (HEAD and GET).
	Silent map[string]bool
	// StallListing sends the listing's headers and its first bytes, then
	// nothing until the client gives up.
	StallListing bool
	// Drip sends these files' bodies one byte per interval.
	Drip map[string]time.Duration
}

// Request is one request the fake hub or CDN received.
type Request struct {
	Host, Method, Path, Range, Authorization string
}

// Server is the fake hub (URL is HF_ENDPOINT) and its CDN.
type Server struct {
	Hub, CDN *httptest.Server
	URL      string

	mu       sync.Mutex
	repos    map[string]*Repo
	renamed  map[string]string // old id → new id
	blobs    map[string]served // sha256 → LFS content on the CDN
	cut      map[string]bool   // files already cut once
	requests []Request
	stop     chan struct{} // closed by Close: stalled handlers return
}

type served struct {
	repo *Repo
	path string
}

// NewServer starts a fake hub serving repos; Close stops it.
func NewServer(repos ...*Repo) *Server {
	s := &Server{repos: map[string]*Repo{}, renamed: map[string]string{}, blobs: map[string]served{}, cut: map[string]bool{},
		stop: make(chan struct{})}
	for _, r := range repos {
		s.Add(r)
	}
	s.CDN = httptest.NewServer(http.HandlerFunc(s.serveCDN))
	s.Hub = httptest.NewServer(http.HandlerFunc(s.serveHub))
	s.URL = s.Hub.URL
	return s
}

// Add serves r (replacing a repository of the same id).
func (s *Server) Add(r *Repo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Commit == "" {
		h := sha1.New()
		for _, p := range sortedKeys(r.Files) {
			fmt.Fprintf(h, "%s %x\n", p, sha256.Sum256(r.Files[p]))
		}
		r.Commit = hex.EncodeToString(h.Sum(nil))
	}
	if r.Revisions == nil {
		r.Revisions = map[string]string{"main": r.Commit}
	}
	s.repos[r.ID] = r
	for p, data := range r.Files {
		if IsLFS(p) {
			s.blobs[SHA256(data)] = served{r, p}
		}
	}
}

// Rename makes old an alias of the served repository newID: requests
// under old get a same-host redirect (307) to newID, as the hub answers
// for a renamed repository.
func (s *Server) Rename(old, newID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renamed[old] = newID
}

// Close stops the hub and the CDN (stalled answers end first).
func (s *Server) Close() {
	s.mu.Lock()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.mu.Unlock()
	s.Hub.Close()
	s.CDN.Close()
}

// wait blocks until the client goes away or the server closes; false
// when it did.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	var tick <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-r.Context().Done():
		return false
	case <-s.stop:
		return false
	case <-tick:
		return true
	}
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// IsLFS says which files the fake hub stores in LFS: weights, as the hub
// does for *.safetensors.
func IsLFS(path string) bool { return strings.HasSuffix(path, ".safetensors") }

// SHA256 is the hex sha256 of data (an LFS file's etag).
func SHA256(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// GitBlobSHA1 is git's blob id of data (a regular file's etag).
func GitBlobSHA1(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

func lfsPointer(data []byte) []byte {
	return fmt.Appendf(nil, "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", SHA256(data), len(data))
}

func (s *Server) record(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{r.Host, r.Method, r.URL.Path, r.Header.Get("Range"), r.Header.Get("Authorization")})
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Error-Code", code)
	w.Header().Set("X-Error-Message", msg)
	http.Error(w, msg, status)
}

// lookup finds the repository and commit named by org/name and rev.
func (s *Server) lookup(w http.ResponseWriter, org, name, rev string) (*Repo, string, bool) {
	s.mu.Lock()
	r := s.repos[org+"/"+name]
	s.mu.Unlock()
	if r == nil {
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
		return nil, "", false
	}
	commit, ok := r.Revisions[rev]
	if !ok && rev == r.Commit {
		commit, ok = rev, true
	}
	if !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil, "", false
	}
	return r, commit, true
}

func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	s.record(r)
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	s.mu.Lock()
	for old, newID := range s.renamed {
		for _, prefix := range []string{"/api/models/" + old + "/", "/" + old + "/"} {
			if rest, ok := strings.CutPrefix(r.URL.Path, prefix); ok {
				s.mu.Unlock()
				w.Header().Set("Location", strings.Replace(prefix, old, newID, 1)+rest+queryOf(r))
				w.WriteHeader(http.StatusTemporaryRedirect)
				return
			}
		}
	}
	s.mu.Unlock()
	switch {
	case len(parts) == 6 && parts[0] == "api" && parts[1] == "models" && parts[4] == "revision" && r.Method == http.MethodGet:
		s.serveInfo(w, r, parts[2], parts[3], parts[5])
	case len(parts) >= 5 && parts[2] == "resolve" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		s.serveResolve(w, r, parts[0], parts[1], parts[3], strings.Join(parts[4:], "/"))
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request, org, name, rev string) {
	repo, commit, ok := s.lookup(w, org, name, rev)
	if !ok {
		return
	}
	if repo.Silent[""] {
		s.wait(r, 0)
		return
	}
	if repo.StallListing {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"id": "`))
		w.(http.Flusher).Flush()
		s.wait(r, 0)
		return
	}
	type lfs struct {
		SHA256      string `json:"sha256"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type sibling struct {
		RFilename string `json:"rfilename"`
		Size      int    `json:"size"`
		BlobID    string `json:"blobId"`
		LFS       *lfs   `json:"lfs,omitempty"`
	}
	out := struct {
		ID       string    `json:"id"`
		SHA      string    `json:"sha"`
		Gated    any       `json:"gated"`
		Siblings []sibling `json:"siblings"`
	}{ID: repo.ID, SHA: commit, Gated: false}
	if repo.Gated {
		out.Gated = "manual"
	}
	for _, p := range sortedKeys(repo.Files) {
		data := repo.Files[p]
		sb := sibling{RFilename: p, Size: len(data), BlobID: GitBlobSHA1(data)}
		if IsLFS(p) {
			ptr := lfsPointer(data)
			sb.BlobID = GitBlobSHA1(ptr)
			sb.LFS = &lfs{SHA256(data), len(data), len(ptr)}
		}
		out.Siblings = append(out.Siblings, sb)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) serveResolve(w http.ResponseWriter, r *http.Request, org, name, rev, path string) {
	repo, commit, ok := s.lookup(w, org, name, rev)
	if !ok {
		return
	}
	if repo.Gated && r.Header.Get("Authorization") != "Bearer "+repo.Token {
		status := http.StatusUnauthorized
		if r.Header.Get("Authorization") != "" {
			status = http.StatusForbidden
		}
		hubError(w, status, "GatedRepo", "Access to model "+repo.ID+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
		return
	}
	if repo.Silent[path] {
		s.wait(r, 0)
		return
	}
	data, ok := repo.Files[path]
	if !ok {
		w.Header().Set("X-Repo-Commit", commit)
		hubError(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if IsLFS(path) {
		sum := SHA256(data)
		w.Header().Set("ETag", `"`+GitBlobSHA1(lfsPointer(data))+`"`)
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
		w.Header().Set("Location", s.CDN.URL+"/blobs/"+sum)
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+GitBlobSHA1(data)+`"`)
	s.serveBytes(w, r, repo, path, data)
}

func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request) {
	s.record(r)
	sum := strings.TrimPrefix(r.URL.Path, "/blobs/")
	s.mu.Lock()
	b, ok := s.blobs[sum]
	s.mu.Unlock()
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	s.serveBytes(w, r, b.repo, b.path, b.repo.Files[b.path])
}

// serveBytes answers a GET or HEAD with data, honouring "Range: bytes=N-"
// and the repository's injected faults.
func (s *Server) serveBytes(w http.ResponseWriter, r *http.Request, repo *Repo, path string, data []byte) {
	if repo.Corrupt[path] && len(data) > 0 {
		bad := append([]byte(nil), data...)
		bad[len(bad)/2] ^= 0xff
		data = bad
	}
	start, partial := 0, false
	if rg := r.Header.Get("Range"); rg != "" && !repo.IgnoreRange && r.Method == http.MethodGet {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		if err != nil || n < 0 || n >= len(data) || repo.RefuseRange {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		if repo.MisplaceRange {
			n = 0
		}
		start, partial = n, true
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, len(data)-1, len(data)))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(data)-start))
	w.Header().Set("Accept-Ranges", "bytes")
	if partial {
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	if r.Method == http.MethodHead {
		return
	}
	body := data[start:]
	if d := repo.Drip[path]; d > 0 {
		for i := range body {
			if _, err := w.Write(body[i : i+1]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			if !s.wait(r, d) {
				return
			}
		}
		return
	}
	s.mu.Lock()
	key := repo.ID + "/" + path
	cutAt, cut := repo.CutAfter[path]
	cut = cut && !s.cut[key] && cutAt < int64(len(body))
	if cut {
		s.cut[key] = true
	}
	s.mu.Unlock()
	if cut {
		_, _ = w.Write(body[:cutAt])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		panic(http.ErrAbortHandler) // drop the connection mid-body
	}
	_, _ = w.Write(body)
}

func queryOf(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return ""
	}
	return "?" + r.URL.RawQuery
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
