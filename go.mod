module github.com/qwenref/qwenref

go 1.26

require (
	github.com/dlclark/regexp2 v1.11.5 // indirect
	github.com/nlpodyssey/safetensors v0.0.0-20250209183917-bfb01cc25f7c // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)
