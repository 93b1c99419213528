//go:build race

package chat

// raceEnabled: the race detector makes code 5–15× slower, which time bounds allow for.
const raceEnabled = true
