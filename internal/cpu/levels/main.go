// Command levels prints the kernel levels this CPU runs, best first, one
// per line: scripts/test runs the model and layer tests once per level.
//
//	go run ./internal/cpu/levels
package main

import (
	"fmt"

	"github.com/qwenref/qwenref/internal/cpu"
)

func main() {
	for _, l := range cpu.Supported() {
		fmt.Println(l)
	}
}
