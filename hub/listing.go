package hub

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/qwenref/qwenref/internal/safeio"
)

const (
	maxInfoBytes = 64 << 20
	maxFiles     = 200000
	maxFileSize  = 1 << 42
)

var (
	hex40 = regexp.MustCompile(`^[0-9a-f]{40}$`)
	hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// parseListing reads the hub's answer to
// /api/models/{repo}/revision/{revision}?blobs=true: the commit and each
// file with its size and hashes. Every file name is checked
// (validateRepoPath) and listed once; u is the URL asked, for messages.
func parseListing(data []byte, repo, revision, u string) (*RepoInfo, error) {
	var raw struct {
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
	if len(data) > maxInfoBytes {
		return nil, fmt.Errorf("listing %s@%s: the hub's answer is over %d MiB", repo, revision, maxInfoBytes>>20)
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("listing %s@%s: %s did not answer with a repository listing: %s", repo, revision, safeio.Clean(u), safeio.Clean(err.Error()))
	}
	if !hex40.MatchString(raw.SHA) {
		return nil, fmt.Errorf("listing %s@%s: commit %s is not a 40-hex hash", repo, revision, safeio.Quote(raw.SHA))
	}
	if len(raw.Siblings) > maxFiles {
		return nil, fmt.Errorf("listing %s@%s: %d files, more than the %d qwenref accepts", repo, revision, len(raw.Siblings), maxFiles)
	}
	info := &RepoInfo{Repo: repo, Commit: raw.SHA, Files: make([]RepoFile, 0, len(raw.Siblings))}
	seen := make(map[string]bool, len(raw.Siblings))
	for _, s := range raw.Siblings {
		f := RepoFile{Path: s.RFilename, BlobID: s.BlobID}
		if err := validateRepoPath(f.Path); err != nil {
			return nil, fmt.Errorf("listing %s@%s: %w; refusing the whole listing", repo, revision, err)
		}
		if seen[f.Path] {
			return nil, fmt.Errorf("listing %s@%s: %s is listed twice", repo, revision, f.Path)
		}
		seen[f.Path] = true
		if s.Size == nil {
			return nil, fmt.Errorf("listing %s@%s: %s has no size (the hub was asked for blobs=true)", repo, revision, f.Path)
		}
		f.Size = *s.Size
		if s.LFS != nil {
			f.SHA256, f.Size = s.LFS.SHA256, s.LFS.Size
			if !hex64.MatchString(f.SHA256) {
				return nil, fmt.Errorf("listing %s@%s: %s: LFS sha256 %s is not 64 hex digits", repo, revision, f.Path, safeio.Quote(f.SHA256))
			}
		} else if !hex40.MatchString(f.BlobID) {
			return nil, fmt.Errorf("listing %s@%s: %s: blob id %s is not 40 hex digits", repo, revision, f.Path, safeio.Quote(f.BlobID))
		}
		if f.Size < 0 || f.Size > maxFileSize {
			return nil, fmt.Errorf("listing %s@%s: %s: size %d out of range", repo, revision, f.Path, f.Size)
		}
		info.Files = append(info.Files, f)
	}
	return info, nil
}
