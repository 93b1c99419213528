//go:build !race

package main

// raceEnabled: the race detector adds its own shadow memory to every peak.
const raceEnabled = false
