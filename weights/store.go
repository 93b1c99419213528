package weights

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/qwenref/qwenref/internal/safeio"
)

// IndexFile is the name of the shard index of a sharded checkpoint.
const IndexFile = "model.safetensors.index.json"

// SingleFile is the name of an unsharded checkpoint inside its directory.
const SingleFile = "model.safetensors"

// Info describes one text tensor of a Store.
type Info struct {
	Name   string // the name the store serves it under
	Stored string // name in the file, which the Namer mapped to Name
	File   string // path of the .safetensors file that holds it
	DType  string // dtype as stored: "BF16", "F16", "F32", ...
	Shape  []int
}

// Store is an opened checkpoint: one or more memory-mapped safetensors files
// whose headers were fully validated by Open. After Open it is read-only and
// safe for concurrent readers. Close unmaps the files; it must not race with
// readers, and zero-copy matrices handed out before Close become invalid.
type Store struct {
	source  string // the path given to Open, for messages
	files   []*mappedFile
	tensors map[string]*entry // by canonical name
	names   []string          // sorted canonical names
	skipped []string          // sorted stored names of the tensors the Namer skipped
	namer   Namer

	closeOnce sync.Once
	closed    atomic.Bool
	closeErr  error
}

// mappedFile is one mmapped .safetensors file.
type mappedFile struct {
	path string
	data []byte
	hdr  *header
}

// entry locates one tensor in its mapping.
type entry struct {
	info       Info
	file       *mappedFile
	begin, end int // absolute byte offsets into file.data
}

// Namer maps a stored tensor name to the name a Store serves it under, or
// reports that the tensor is skipped (kept out of Names, listed by
// Skipped). A model family supplies its own; nil keeps names as stored.
type Namer func(stored string) (name string, skip bool)

// Open opens a checkpoint with its tensors under their stored names. path
// may be a directory (its model.safetensors.index.json if present, else
// model.safetensors, else every *.safetensors file in it), an index file,
// or a single .safetensors file. Every header is validated now; see the
// package doc for the checks.
func Open(path string) (*Store, error) { return OpenNamed(path, nil) }

// OpenNamed is Open with the names given by names (nil: as stored); two
// stored names that map to one name are an error.
func OpenNamed(path string, names Namer) (*Store, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", clean(path), errors.Unwrap(err))
	}
	if !st.IsDir() {
		if strings.HasSuffix(path, ".index.json") {
			return openSharded(path, path, names)
		}
		return openFiles(path, []string{path}, names)
	}
	index := filepath.Join(path, IndexFile)
	if _, err := os.Stat(index); err == nil {
		return openSharded(path, index, names)
	}
	single := filepath.Join(path, SingleFile)
	if _, err := os.Stat(single); err == nil {
		return openFiles(path, []string{single}, names)
	}
	files, err := filepath.Glob(filepath.Join(path, "*.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("weights: %s: no %s, %s or *.safetensors file in the directory", path, IndexFile, SingleFile)
	}
	if len(files) > MaxShards {
		return nil, fmt.Errorf("weights: %s: %d *.safetensors files, over the limit of %d (see docs/limits.md)", clean(path), len(files), MaxShards)
	}
	sort.Strings(files)
	return openFiles(path, files, names)
}

// openFiles maps and validates files; a stored name in two of them is an
// error. The tensors are then indexed under their canonical names.
func openFiles(source string, paths []string, names Namer) (*Store, error) {
	s := &Store{source: source, namer: names}
	var errs []error
	for _, p := range paths {
		mf, err := mapFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.files = append(s.files, mf)
	}
	if err := joinErrors(errs); err != nil {
		s.unmapAll()
		return nil, err
	}
	if len(s.files) > 1 {
		p := &problems{file: source}
		where := make(map[string]string)
		for _, mf := range s.files {
			for _, t := range mf.hdr.tensors {
				if other, dup := where[t.name]; dup {
					p.tensorf(t.name, "present in both %s and %s", clean(other), clean(mf.path))
					continue
				}
				where[t.name] = mf.path
			}
		}
		if err := p.err(); err != nil {
			s.unmapAll()
			return nil, err
		}
	}
	if err := s.index(); err != nil {
		s.unmapAll()
		return nil, err
	}
	return s, nil
}

// mapFile opens, maps and validates one .safetensors file. The file
// descriptor is closed at once: the mapping keeps the pages reachable.
func mapFile(path string) (*mappedFile, error) {
	f, st, err := safeio.Open(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	defer f.Close()
	if st.Size() < 8 {
		return nil, &FormatError{File: path, Problems: []string{
			fmt.Sprintf("file is %d bytes, too short for the 8-byte header length field", st.Size())}}
	}
	if err := reserveMapping(path); err != nil {
		return nil, err
	}
	data, err := mmapFile(f, st.Size())
	if err != nil {
		releaseMapping()
		return nil, fmt.Errorf("weights: %s: %w", clean(path), err)
	}
	var hdr *header
	err = guardFault(func() error {
		var err error
		hdr, err = parseHeader(path, data)
		return err
	}, func(addr uintptr) (string, int64) {
		off, ok := offsetIn(data, addr)
		if !ok {
			off = -1
		}
		return path, off
	})
	if err != nil {
		_ = munmap(data)
		releaseMapping()
		return nil, err
	}
	return &mappedFile{path: path, data: data, hdr: hdr}, nil
}

// canonical maps a stored name through the store's Namer.
func (s *Store) canonical(stored string) (string, bool) {
	if s.namer == nil {
		return stored, false
	}
	return s.namer(stored)
}

// index builds the canonical-name table over all mapped files.
func (s *Store) index() error {
	p := &problems{file: s.source}
	s.tensors = make(map[string]*entry)
	for _, mf := range s.files {
		for _, t := range mf.hdr.tensors {
			name, skip := s.canonical(t.name)
			if skip {
				s.skipped = append(s.skipped, t.name)
				continue
			}
			if prev, dup := s.tensors[name]; dup {
				p.addf("tensors %s (%s) and %s (%s) both map to canonical name %s",
					quote(prev.info.Stored), clean(prev.info.File), quote(t.name), clean(mf.path), quote(name))
				continue
			}
			s.tensors[name] = &entry{
				info: Info{Name: name, Stored: t.name, File: mf.path, DType: t.dtype, Shape: t.shape},
				file: mf, begin: mf.hdr.dataStart + t.begin, end: mf.hdr.dataStart + t.end,
			}
			s.names = append(s.names, name)
		}
	}
	sort.Strings(s.names)
	sort.Strings(s.skipped)
	return p.err()
}

// Close unmaps every file. Calling it again returns the first result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.closeErr = s.unmapAll()
	})
	return s.closeErr
}

func (s *Store) unmapAll() error {
	var errs []error
	for _, mf := range s.files {
		if mf.data != nil {
			if err := munmap(mf.data); err != nil {
				errs = append(errs, fmt.Errorf("weights: %s: munmap: %w", clean(mf.path), err))
			}
			releaseMapping()
			mf.data = nil
		}
	}
	return errors.Join(errs...)
}

// Names returns the sorted canonical names of the text tensors.
func (s *Store) Names() []string { return slices.Clone(s.names) }

// Skipped returns the sorted stored names of the tensors the Namer skipped
// (for Qwen checkpoints: the vision tower and the MTP head).
func (s *Store) Skipped() []string { return slices.Clone(s.skipped) }

// Files returns the paths of the mapped .safetensors files, in open order.
func (s *Store) Files() []string {
	out := make([]string, len(s.files))
	for i, mf := range s.files {
		out[i] = mf.path
	}
	return out
}

// Info describes the tensor with the given canonical name.
func (s *Store) Info(name string) (Info, bool) {
	e, ok := s.tensors[name]
	if !ok {
		return Info{}, false
	}
	info := e.info
	info.Shape = slices.Clone(info.Shape) // callers may not alias the store
	return info, true
}

// lookup finds a tensor for reading, refusing after Close.
func (s *Store) lookup(name string) (*entry, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("weights: %s: store is closed", s.source)
	}
	e, ok := s.tensors[name]
	if !ok {
		return nil, fmt.Errorf("weights: %s: no tensor %s (names are as the model family maps them, e.g. without a checkpoint prefix)", clean(s.source), quote(name))
	}
	return e, nil
}

// bytes returns the tensor's raw little-endian bytes inside the mapping.
func (e *entry) bytes() []byte { return e.file.data[e.begin:e.end:e.end] }
