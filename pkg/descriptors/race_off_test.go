//go:build !race

package descriptors

const raceEnabled = false
