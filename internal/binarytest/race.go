//go:build race

package binarytest

const raceEnabled = true
