package limiter

import "time"

// Clock tells the time. The memory store reads it once per evaluation; tests
// inject a fake. The Redis store ignores it: Redis TIME drives enforcement.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
