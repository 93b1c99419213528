package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
)

// MaxIndexBytes bounds how much of an index file is read: a 27B index is
// about 100 KB, so anything near this is not an index.
const MaxIndexBytes = 64 << 20

// MaxShards caps how many files one checkpoint may map: the largest
// published checkpoints have a few hundred shards, and each file costs a
// kernel mapping (vm.max_map_count is 65530 by default, shared with the Go
// runtime), so tens of thousands of shards would exhaust it.
const MaxShards = 4096

// openSharded opens the shards an index names and checks that the index and
// the shard headers agree: every listed tensor is in its shard, no shard
// holds an unlisted tensor, and no tensor is in two shards.
func openSharded(source, indexPath string, namer Namer) (*Store, error) {
	weightMap, err := readIndex(indexPath)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(indexPath)
	var shards []string
	seenShard := make(map[string]bool)
	for _, shard := range weightMap {
		if !seenShard[shard] {
			seenShard[shard] = true
			shards = append(shards, shard)
		}
	}
	sort.Strings(shards)
	if len(shards) > MaxShards {
		return nil, &FormatError{File: indexPath, Problems: []string{fmt.Sprintf(
			"the index names %d shard files, over the limit of %d (see docs/limits.md)", len(shards), MaxShards)}}
	}

	s := &Store{source: source, namer: namer}
	p := &problems{file: indexPath}
	var shardErrs []error
	for _, shard := range shards {
		path := filepath.Join(dir, shard)
		if _, err := os.Stat(path); err != nil {
			p.addf("shard %s named in the index is missing: %v", clean(shard), safeio.Bare(err))
			continue
		}
		mf, err := mapFile(path)
		if err != nil {
			shardErrs = append(shardErrs, err)
			continue
		}
		s.files = append(s.files, mf)
	}

	// found maps a stored name to the shard (base name) holding it.
	found := make(map[string]string)
	for _, mf := range s.files {
		shard := filepath.Base(mf.path)
		for _, t := range mf.hdr.tensors {
			if other, dup := found[t.name]; dup {
				p.tensorf(t.name, "present in two shards, %s and %s", clean(other), clean(shard))
				continue
			}
			found[t.name] = shard
			switch want, listed := weightMap[t.name]; {
			case !listed:
				p.tensorf(t.name, "in shard %s but not listed in the index", clean(shard))
			case want != shard:
				p.tensorf(t.name, "in shard %s but the index places it in %s", clean(shard), clean(want))
			}
		}
	}
	opened := make(map[string]bool)
	for _, mf := range s.files {
		opened[filepath.Base(mf.path)] = true
	}
	names := make([]string, 0, len(weightMap))
	for name := range weightMap {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		shard := weightMap[name]
		if _, ok := found[name]; !ok && opened[shard] {
			p.tensorf(name, "listed in the index for shard %s but absent from it", clean(shard))
		}
	}

	if err := joinErrors(append([]error{p.err()}, shardErrs...)); err != nil {
		s.unmapAll()
		return nil, err
	}
	if err := s.index(); err != nil {
		s.unmapAll()
		return nil, err
	}
	return s, nil
}

// readIndex parses model.safetensors.index.json: an object whose
// "weight_map" maps stored tensor names to shard file names. Other members
// ("metadata" with total_size) are informational and ignored.
func readIndex(path string) (map[string]string, error) {
	data, err := safeio.ReadCapped(path, MaxIndexBytes, "shard index")
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	p := &problems{file: path}
	// The strict reader first: invalid UTF-8, a lone surrogate or a key
	// twice anywhere (a tensor listed twice included) is refused by name.
	if err := safeio.DecodeJSON(data, nil); err != nil {
		p.addf("index: %v", err)
		return nil, p.err()
	}
	top, err := decodeObject(data, 64)
	if errors.Is(err, errTooMany) {
		p.addf("index has more than 64 top-level members (an index holds metadata and weight_map)")
		return nil, p.err()
	}
	if err != nil {
		p.addf("index is not valid JSON: %v", err)
		return nil, p.err()
	}
	var rawMap json.RawMessage
	for _, kv := range top {
		if kv.key == "weight_map" {
			if kv.dup {
				p.addf(`"weight_map" appears twice`)
			}
			rawMap = kv.raw
		}
	}
	if trimmed := bytes.TrimSpace(rawMap); len(trimmed) == 0 || trimmed[0] != '{' {
		p.addf(`index has no "weight_map" object`)
		return nil, p.err()
	}
	members, err := decodeObject(rawMap, MaxTensors)
	if errors.Is(err, errTooMany) {
		p.addf(`"weight_map" lists more than %d tensors, the limit (see docs/limits.md)`, MaxTensors)
		return nil, p.err()
	}
	if err != nil {
		p.addf(`"weight_map" is not valid JSON: %v`, err)
		return nil, p.err()
	}
	weightMap := make(map[string]string, len(members))
	for _, kv := range members {
		var shard string
		switch {
		case kv.dup:
			p.tensorf(kv.key, "listed twice in the weight_map")
		case decodeString(kv.raw, &shard) != nil:
			p.tensorf(kv.key, "shard is not a string")
		case !validShardName(shard):
			p.tensorf(kv.key, "shard %s is not a plain file name in the index's directory", quote(shard))
		default:
			weightMap[kv.key] = shard
		}
	}
	if len(members) == 0 {
		p.addf(`"weight_map" lists no tensors`)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return weightMap, nil
}

// validShardName accepts only a plain file name, so an index can never make
// the reader open a file outside the checkpoint directory. A NUL can be in
// no file name (the system would refuse it as an invalid argument).
func validShardName(name string) bool {
	return name != "" && name != "." && name != ".." &&
		!strings.ContainsAny(name, "/\\\x00") && filepath.Base(name) == name
}
