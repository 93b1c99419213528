package hub

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
)

// maxTokenBytes caps the token file (a token is under 100 bytes).
const maxTokenBytes = 4096

// TokenPath is where huggingface_hub stores the login token: HF_TOKEN_PATH,
// else HomeDir()/token (what `hf auth login` writes).
func TokenPath() string {
	if p := os.Getenv("HF_TOKEN_PATH"); p != "" {
		return expandHome(p)
	}
	return filepath.Join(HomeDir(), "token")
}

// Token returns the access token and where it came from: HF_TOKEN (or the
// legacy HUGGING_FACE_HUB_TOKEN), else the token file. Empty when neither
// holds one; a token file that cannot be read counts as none (ReadToken
// says why).
func Token() (token, source string) {
	token, source, _ = ReadToken()
	return token, source
}

// ReadToken is Token with the reason a token file present at TokenPath
// was not used: it is read through the safe opener, so a FIFO or device
// there is refused at once instead of blocking, and one over 4 KiB is
// refused unread. A missing file is no error.
func ReadToken() (token, source string, err error) {
	for _, v := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := strings.TrimSpace(os.Getenv(v)); t != "" {
			return t, v, nil
		}
	}
	p := TokenPath()
	data, err := safeio.ReadCapped(p, maxTokenBytes, "the token file")
	if errors.Is(err, os.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("token file (HF_TOKEN_PATH, else HF_HOME/token): %w", err)
	}
	if t := strings.TrimSpace(string(data)); t != "" {
		if !printable(t) {
			return "", "", fmt.Errorf("token file %s: holds control characters, not a token", safeio.Clean(p))
		}
		return t, p, nil
	}
	return "", "", nil
}
