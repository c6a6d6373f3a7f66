//go:build testclock

package app

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestClockEnv names the file a binary built with `-tags testclock` reads
// its clock from (docs/testing.md): Unix milliseconds, re-read on every
// reading, so that a test steps the clock by rewriting the file. Builds
// without the tag have no such variable: this file is not compiled into
// them.
const TestClockEnv = "ENVOY_RLS_TEST_CLOCK_FILE"

// testClock returns the clock of TestClockEnv's file, or nil when the
// variable is unset.
func testClock(getenv func(string) string) (limiter.Clock, error) {
	path := getenv(TestClockEnv)
	if path == "" {
		return nil, nil
	}
	c := &fileClock{path: path}
	if _, err := c.read(); err != nil {
		return nil, fmt.Errorf("%s: %w", TestClockEnv, err)
	}
	return c, nil
}

// fileClock is the time written in a file; a failed read keeps the last
// good one.
type fileClock struct {
	path string
	mu   sync.Mutex
	last time.Time
}

func (c *fileClock) read() (time.Time, error) {
	b, err := os.ReadFile(c.path)
	if err != nil {
		return time.Time{}, err
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: not Unix milliseconds: %w", c.path, err)
	}
	return time.UnixMilli(ms), nil
}

func (c *fileClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, err := c.read(); err == nil {
		c.last = t
	}
	return c.last
}
