package hub

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/qwenref/qwenref/internal/safeio"
)

// maxPathBytes caps one file name from a listing.
const maxPathBytes = 4096

// NameError reports a file name in a hub listing (or a checkpoint index)
// that qwenref refuses to create.
type NameError struct {
	Name   string // as the server sent it
	Reason string
}

// Error shows the name escaped, so a name with terminal escapes or line
// breaks cannot rewrite the terminal or forge a summary line.
func (e *NameError) Error() string {
	return fmt.Sprintf("file name %s %s", safeio.Quote(e.Name), e.Reason)
}

// validateRepoPath refuses file names that could leave the snapshot or
// the local dir, or do harm there: an empty, absolute or unclean path, a
// "." or ".." component, a backslash, a component ".git" (which would let
// a repository write a git config whose hooks run on the next git
// command), anything under .cache/huggingface/ (the local dir's own
// metadata), and control, format (bidi) or invalid UTF-8 characters.
// Case is ignored for ".git" and ".cache/huggingface", as on macOS and
// Windows file systems.
func validateRepoPath(p string) error {
	switch {
	case p == "":
		return &NameError{p, "is empty"}
	case len(p) > maxPathBytes:
		return &NameError{p, fmt.Sprintf("is longer than %d bytes", maxPathBytes)}
	case !printable(p):
		return &NameError{p, "has control, format or invalid UTF-8 characters"}
	case strings.HasPrefix(p, "/"):
		return &NameError{p, "is absolute"}
	case strings.Contains(p, `\`):
		return &NameError{p, "has a backslash"}
	case path.Clean(p) != p:
		return &NameError{p, "is not a clean relative path"}
	}
	parts := strings.Split(p, "/")
	for _, part := range parts {
		switch {
		case part == "." || part == "..":
			return &NameError{p, "is not a clean relative path"}
		case isGitDir(part):
			return &NameError{p, "has a .git component, which could plant a git configuration"}
		}
	}
	if len(parts) >= 2 && strings.EqualFold(parts[0], ".cache") && strings.EqualFold(parts[1], "huggingface") {
		return &NameError{p, "is under .cache/huggingface/, where the download keeps its own records"}
	}
	return nil
}

// isGitDir reports whether a path component names the git directory on
// some file system: ".git" in any case, with trailing dots or spaces
// (which Windows drops), or its 8.3 short name "git~1".
func isGitDir(part string) bool {
	trimmed := strings.TrimRight(part, ". ")
	return strings.EqualFold(trimmed, ".git") || strings.EqualFold(part, "git~1")
}

// printable reports whether s is valid UTF-8 with no control or format
// characters (space is allowed): what safeio.Clean would show unchanged.
func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || r != ' ' && !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}
