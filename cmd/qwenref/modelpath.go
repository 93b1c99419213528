package main

import (
	"fmt"
	"io"
	"os"

	"github.com/qwenref/qwenref/hub"
)

// modelDir turns --model into a checkpoint directory, for every command
// that takes one. A path that exists wins; otherwise org/name[@revision]
// is looked up in the Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub or
// ~/.cache/huggingface/hub) without touching the network. "" stays ""
// (the bundled demo).
func modelDir(arg string, stderr io.Writer) (string, error) {
	if arg == "" {
		return "", nil
	}
	if _, err := os.Stat(arg); err == nil {
		return arg, nil
	}
	repo, rev, err := hub.ParseRef(arg)
	if err != nil {
		return "", fmt.Errorf("--model %s: no such directory, nor a Hugging Face repo id (org/name[@revision])", arg)
	}
	dir, err := hub.Resolve(hub.CacheDir(), repo, rev)
	if err != nil {
		return "", fmt.Errorf("--model %s: no such directory, and %w", arg, err)
	}
	fmt.Fprintf(stderr, "model: %s@%s from the Hugging Face cache, %s\n", repo, rev, dir)
	return dir, nil
}

// resolveModelFlag replaces the --model value *dir with its directory
// (see modelDir).
func resolveModelFlag(dir *string, stderr io.Writer) error {
	d, err := modelDir(*dir, stderr)
	if err != nil {
		return err
	}
	*dir = d
	return nil
}
