package model_test

// The model tests link the CUDA backend, whose init registers "cuda",
// "cuda-fp32" and "cuda-ops", so every test that loops over BackendNames()
// runs them too (and skips them with a logged reason where no driver,
// cuBLAS or GPU is found).
import _ "github.com/qwenref/qwenref/cuda"
