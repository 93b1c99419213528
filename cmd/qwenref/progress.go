package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/qwenref/qwenref/model"
)

// memAvailable is MemAvailable from /proc/meminfo in bytes (0 if unknown).
func memAvailable() int64 { return meminfoKB("MemAvailable") * 1024 }

// prefault pages a large checkpoint in when it fits comfortably in RAM,
// with a progress bar when stderr is a terminal (one line otherwise);
// otherwise it says the weights will stream.
func prefault(m *model.Model, stderr io.Writer) error {
	size := m.WeightBytes()
	const big = 256 << 20
	if size < big {
		return nil
	}
	if avail := memAvailable(); avail > 0 && size > avail*6/10 {
		fmt.Fprintf(stderr, "weights: %.1f GB memory-mapped, more than 60%% of available RAM (%.1f GB): streaming, each layer pages in for its turn and is dropped after it\n",
			float64(size)/1e9, float64(avail)/1e9)
		m.SetStreaming(true)
		return nil
	}
	start := time.Now()
	if !isTerminal(stderr) {
		// No \r into pipes and files: one line when done.
		if err := m.Prefault(func(done, total int64) {}); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "loaded weights (%.2f GB) in %v\n", float64(size)/1e9, time.Since(start).Round(time.Millisecond))
		return nil
	}
	last := time.Time{}
	err := m.Prefault(func(done, total int64) {
		if time.Since(last) < 100*time.Millisecond && done < total {
			return
		}
		last = time.Now()
		const width = 30
		n := int(float64(width) * float64(done) / float64(total))
		fmt.Fprintf(stderr, "\rloading weights [%s%s] %5.1f%% of %.2f GB", strings.Repeat("█", n), strings.Repeat("·", width-n),
			100*float64(done)/float64(total), float64(total)/1e9)
	})
	fmt.Fprintf(stderr, " in %v\n", time.Since(start).Round(time.Millisecond))
	return err
}
