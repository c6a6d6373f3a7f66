//go:build !unix

package memory_test

import "time"

// processCPU is unknown here; the cpu-ns/op metric then reads 0.
func processCPU() time.Duration { return 0 }
