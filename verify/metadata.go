package verify

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/qwenref/qwenref/internal/safeio"
)

// maxMetadataHeader caps the safetensors header ReadMetadata reads, the
// format's own 100 MB limit.
const maxMetadataHeader = 100_000_000

// ReadMetadata returns the __metadata__ strings of a safetensors file
// (empty when it has none): a golden's op, dims and tolerances, a trace's
// ids. The header length is checked against the cap and the file size
// before anything is allocated.
func ReadMetadata(path string) (map[string]string, error) {
	// Opened without blocking: a FIFO or device is refused at once.
	f, st, err := safeio.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("%s: too short for a safetensors header: %w", safeio.Clean(path), err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxMetadataHeader || n > uint64(st.Size())-8 {
		return nil, fmt.Errorf("%s: header length %d is past the file's %d bytes or the %d-byte cap", safeio.Clean(path), n, st.Size(), maxMetadataHeader)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return nil, fmt.Errorf("%s: %w", safeio.Clean(path), err)
	}
	var parsed struct {
		Meta map[string]string `json:"__metadata__"`
	}
	if err := json.Unmarshal(hdr, &parsed); err != nil {
		return nil, fmt.Errorf("%s: safetensors header: %w", safeio.Clean(path), err)
	}
	if parsed.Meta == nil {
		parsed.Meta = map[string]string{}
	}
	return parsed.Meta, nil
}
