package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/qwenref/qwenref/internal/safeio"
	"gonum.org/v1/plot"
)

// WriteAtomic writes a file through a temporary one in the same directory
// and a rename, so readers see the old file or the whole new one, never a
// part. It is internal/safeio's writer: the target must be absent or a
// regular file, and the temp is removed on error or SIGINT/SIGTERM.
func WriteAtomic(path string, fill func(io.Writer) error) error {
	return safeio.WriteFile(path, fill, safeio.WriteOptions{})
}

// dataFiles are what WriteData writes into its directory.
var dataFiles = []string{"results.csv", "results.json", "report.txt"}

// PrepareDataDir creates dir if missing and says whether WriteData could
// write into it: each of its files absent or a regular file
// (internal/safeio's rule), so a sweep is refused before it runs rather
// than after its first group.
func PrepareDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range dataFiles {
		if _, _, err := safeio.CheckTarget(filepath.Join(dir, name), safeio.WriteOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// WriteData writes results.csv, results.json and report.txt into dir
// (created if missing). The sweep calls it after every (op, T) group, so
// an interrupted sweep keeps what it finished.
func WriteData(dir string, meta Meta, results []Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := []struct {
		name string
		fill func(io.Writer) error
	}{
		{dataFiles[0], func(w io.Writer) error { return WriteCSV(w, meta, results) }},
		{dataFiles[1], func(w io.Writer) error { return WriteJSON(w, meta, results) }},
		{dataFiles[2], func(w io.Writer) error { return WriteTable(w, meta, results) }},
	}
	for _, f := range files {
		if err := WriteAtomic(filepath.Join(dir, f.name), f.fill); err != nil {
			return err
		}
	}
	return nil
}

// WritePlots writes time-<op> and penalty-<op> charts as SVG and PNG into
// dir, captioned from meta, and returns the paths written. Each chart is
// rendered in memory first, so a failing render leaves no file behind.
func WritePlots(dir string, meta Meta, results []Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, op := range groupOps(results) {
		for _, kind := range []struct {
			name string
			make func(Meta, []Result, string) (*plot.Plot, error)
		}{{"time", timePlot}, {"penalty", penaltyPlot}} {
			p, err := kind.make(meta, results, op)
			if err != nil {
				return written, fmt.Errorf("%s plot of %s: %w", kind.name, op, err)
			}
			if p == nil {
				continue
			}
			for _, format := range []string{"svg", "png"} {
				var buf bytes.Buffer
				if err := renderPlot(p, format, &buf); err != nil {
					return written, fmt.Errorf("%s plot of %s: %w", kind.name, op, err)
				}
				path := filepath.Join(dir, fmt.Sprintf("%s-%s.%s", kind.name, op, format))
				if err := WriteAtomic(path, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err }); err != nil {
					return written, err
				}
				written = append(written, path)
			}
		}
	}
	return written, nil
}
