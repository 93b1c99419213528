package hub

import (
	"os"
	"path/filepath"
	"strings"
)

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
// holds one; a token file that cannot be read counts as none.
func Token() (token, source string) {
	for _, v := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := strings.TrimSpace(os.Getenv(v)); t != "" {
			return t, v
		}
	}
	p := TokenPath()
	data, err := os.ReadFile(p)
	if err != nil || len(data) > 4096 {
		return "", ""
	}
	if t := strings.TrimSpace(string(data)); t != "" {
		return t, p
	}
	return "", ""
}
