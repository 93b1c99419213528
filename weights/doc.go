// Package weights reads and writes safetensors checkpoints for qwenref.
//
// # Reading
//
// Open maps each .safetensors file read-only (mmap, PROT_READ, MAP_SHARED)
// and never reads a file into memory. A checkpoint is a directory (with a
// model.safetensors.index.json, else model.safetensors, else every
// *.safetensors file), an index file, or one .safetensors file.
//
// Every header is validated at Open, so that a later read can only fail for
// a reason about the tensor asked for, never by slicing outside a file:
//
//   - the 8-byte little-endian header length must fit in the file and stay
//     within the reference implementation's 100 MB limit;
//   - the header must be UTF-8 JSON: one object, with an optional
//     __metadata__ object of strings, and per tensor a string "dtype", a
//     "shape" of natural numbers and a pair of "data_offsets"; a name listed
//     twice is an error (encoding/json would silently keep the last);
//   - offsets must lie in the data section and, sorted, tile it exactly: no
//     overlap, no gap, no trailing bytes, as the reference implementation
//     requires;
//   - for a known dtype the byte count must equal element size × prod(shape).
//     An unknown dtype is accepted at Open (a checkpoint may carry tensors
//     this package never reads) and is an error only when that tensor is
//     read; its offsets are checked all the same.
//
// For a sharded checkpoint the index must be a JSON object whose
// "weight_map" maps each stored name once to a plain file name in the same
// directory; every named shard must exist and validate; every listed tensor
// must be in its shard, no shard may hold an unlisted tensor, and no tensor
// may be in two shards. Problems are collected, so one *FormatError names the
// file and lists what is wrong with it, tensor by tensor.
//
// # Naming
//
// A Store serves tensors under the names its Namer gives (OpenNamed); the
// model package supplies the Qwen families' mapping (the hub's prefixes,
// the vision tower and the MTP head skipped), so this package knows no
// model's names. Two stored names with one served name are an error naming
// both.
//
// # Why weights stay bf16 over the mmap
//
// The 27B checkpoint is about 54 GB of bf16. Widening it to float32 would
// need 108 GB of RAM and minutes of conversion before the first token. So
// Matrix returns bf16 tensors as bf16, and when the bytes are 2-byte aligned
// (always, for files written as the reference implementation writes them)
// the slice aliases the mapping itself: opening costs nothing, pages load on
// first touch, and the kernel may drop them again under memory pressure.
// Kernels widen bf16 one tile at a time. F32 tensors alias the mapping the
// same way; F16 is widened once, since no kernel takes it. Aliased slices
// are read-only memory — writing to one faults — and die with Close.
//
// # Writing
//
// WriteFile and StreamWriter write standard files laid out as the reference
// implementation lays them out (header padded with spaces to 8 bytes,
// tensors by descending element size then by name, so each is aligned to its
// element size), converting float32 data to bf16 by round-to-nearest-even.
// StreamWriter fixes the header up front and accepts data in pieces and in
// any order, so a 27B shard needs only as much memory as the caller's
// piece. Writes go to a temporary file in the destination directory that is
// renamed into place only when complete, so a failure never leaves a
// partial file. WriteIndex writes a shard index the same way. A target must
// be absent or a regular file that is none of WriteOptions.Inputs; the temp
// (".<name>.qwenref-tmp-<pid>-*") is removed on SIGINT, SIGTERM, SIGHUP
// and a broken standard output or error too.
//
// # Hostile files
//
// Files are opened without blocking and must be regular (a FIFO is an
// error, not a hang); the index read is capped (MaxIndexBytes), as are the
// shard count (MaxShards) and the files mapped at once (MaxMappings). A
// mapped file truncated after Open makes reads fault: Float32, Matrix and
// CheckNonFinite, and any read inside Guard, turn that into a *FaultError
// naming the file. Names from a file are escaped in every message.
package weights
