package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/qwenref/qwenref/hub"
	"github.com/qwenref/qwenref/internal/safeio"
)

func init() {
	register(&command{name: "download", summary: "fetch a checkpoint from the Hugging Face hub into its cache (shared with Python)", run: runDownload})
}

// patternList is a repeatable, comma-separated flag.
type patternList []string

// String joins the patterns (flag.Value).
func (p *patternList) String() string { return strings.Join(*p, ",") }

// Set adds comma-separated patterns (flag.Value).
func (p *patternList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*p = append(*p, s)
		}
	}
	return nil
}

func runDownload(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("download", "org/name[@revision] [--revision R] [--include PATTERNS] [--local-dir DIR]", `
Fetches a checkpoint from the Hugging Face hub into the Hugging Face cache,
in the layout huggingface_hub uses, so transformers sees the same files and
'qwenref run --model org/name' finds them offline. It prints the snapshot
directory on stdout.

By default it fetches only what qwenref reads: config.json,
generation_config.json, the tokenizer files (tokenizer.json,
tokenizer_config.json, chat_template.jinja, ...) and the *.safetensors
weights with their index; not the vision preprocessor configs, README or
other formats. --include replaces that list with shell patterns (as
huggingface_hub's allow_patterns: '*' also matches '/').

It checks the free disk space first, takes the same .lock files as
huggingface_hub (so two downloads of one file, from Python or qwenref, wait
for each other), resumes an interrupted file from its blobs/<etag>.incomplete
with an HTTP Range request (run the same command again), verifies every
file's size and sha256 (git sha1 for small files), and links a snapshot
entry only once its blob is complete; refs/<revision> is written last.

Environment (as huggingface_hub reads it):
  HF_ENDPOINT      the hub (default https://huggingface.co)
  HF_TOKEN         access token for gated or private repositories; else the
                   token file HF_TOKEN_PATH or HF_HOME/token ('hf auth login')
  HF_HUB_CACHE     the cache (default HF_HOME/hub, ~/.cache/huggingface/hub)
  HF_HUB_OFFLINE   1 refuses the network
  HF_HUB_DISABLE_PROGRESS_BARS  1: no progress bar (there is none off a terminal)

Examples:
  qwenref download Qwen/Qwen3.5-0.8B
  qwenref run --model Qwen/Qwen3.5-0.8B --prompt "The capital of France is"
  qwenref download Qwen/Qwen3.6-27B --revision main
  qwenref download Qwen/Qwen3.5-0.8B --include "*.json" --local-dir ./qwen-configs`, stderr)
	revision := fs.String("revision", "", "branch, tag or commit (default main, or the @revision of the repo id)")
	var include patternList
	fs.Var(&include, "include", "only files matching these patterns (comma-separated or repeated); default: what qwenref reads")
	localDir := fs.String("local-dir", "", "write plain files into DIR instead of the cache (huggingface_hub's local_dir layout)")
	ref, err := parseWithPositional(fs, args)
	if err != nil {
		return err
	}
	if ref == "" {
		return usageError(fs, stderr, "missing the repository: qwenref download org/name")
	}
	repo, rev, err := hub.ParseRef(ref)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	if *revision != "" {
		if strings.Contains(ref, "@") && rev != *revision {
			return usageError(fs, stderr, "%s names revision %s but --revision says %s", ref, rev, *revision)
		}
		if _, rev, err = hub.ParseRef(repo + "@" + *revision); err != nil {
			return usageError(fs, stderr, "--revision: %v", err)
		}
	}

	c := hub.NewClient()
	c.Log = stderr
	if f, ok := stderr.(*os.File); ok && hub.IsTerminal(f) && !hub.ProgressDisabled() {
		c.Progress = newProgressLine(stderr).update
	}
	ctx, stop := safeio.NotifyContext(context.Background(), os.Interrupt) // not if started with it ignored
	defer stop()
	start := time.Now()
	fmt.Fprintf(stderr, "download: %s@%s from %s into %s\n", repo, rev, safeio.Clean(c.Endpoint), safeio.Clean(downloadTarget(c, *localDir)))
	res, err := c.Download(ctx, repo, hub.Options{Revision: rev, Include: include, LocalDir: *localDir})
	if c.Progress != nil {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("interrupted; run the same command again to resume")
		}
		return err
	}
	var fetched, cached int64
	for _, f := range res.Files {
		if f.Status == hub.StatusCached || f.Status == hub.StatusLinked {
			cached += f.Size
		} else {
			fetched += f.Size
		}
		fmt.Fprintf(stderr, "  %-10s %10s  %s\n", f.Status, hub.FormatBytes(f.Size), safeio.Clean(f.Path))
	}
	fmt.Fprintf(stderr, "download: commit %s, %d files: %s fetched, %s already here, in %v\n",
		res.Commit, len(res.Files), hub.FormatBytes(fetched), hub.FormatBytes(cached), time.Since(start).Round(time.Millisecond))
	if *localDir == "" {
		fmt.Fprintf(stderr, "run it with: qwenref run --model %s%s --prompt \"...\"\n", repo, atRevision(rev))
	} else {
		fmt.Fprintf(stderr, "run it with: qwenref run --model %s --prompt \"...\"\n", safeio.Clean(res.Dir))
	}
	fmt.Fprintln(stdout, res.Dir)
	return nil
}

func downloadTarget(c *hub.Client, localDir string) string {
	if localDir != "" {
		return localDir
	}
	return c.CacheDir
}

func atRevision(rev string) string {
	if rev == hub.DefaultRevision {
		return ""
	}
	return "@" + rev
}

// progressLine redraws one status line (only used on a terminal).
type progressLine struct {
	w          io.Writer
	file       string
	start, upd time.Time
	startBytes int64
}

func newProgressLine(w io.Writer) *progressLine { return &progressLine{w: w} }

func (p *progressLine) update(file string, done, total int64) {
	now := time.Now()
	if file != p.file {
		if p.file != "" {
			fmt.Fprintln(p.w)
		}
		p.file, p.start, p.startBytes = file, now, done
	} else if now.Sub(p.upd) < 100*time.Millisecond && done < total {
		return
	}
	p.upd = now
	rate := float64(done-p.startBytes) / max(now.Sub(p.start).Seconds(), 1e-3)
	name := file
	if len(name) > 40 {
		name = "…" + name[len(name)-39:]
	}
	fmt.Fprintf(p.w, "\r  %-40s %5.1f%% of %-9s %8s/s ", name, 100*float64(done)/float64(max(total, 1)), hub.FormatBytes(total), hub.FormatBytes(int64(rate)))
}
