//go:build cuda

package model_test

// With -tags cuda the model tests link the CUDA backend, whose init
// registers "cuda", so every test that loops over BackendNames() runs it too
// (and skips it with a logged reason where no GPU or library is found).
import _ "github.com/qwenref/qwenref/cuda"
