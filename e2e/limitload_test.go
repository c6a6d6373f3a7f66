package e2e_test

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// limitLoad is a paced load of calls to one replica, each for a new subject
// of one key, so every answer is OK whatever limit is in force; it tallies
// the answers and counts them by the limit they report, which shows which
// rules answered.
type limitLoad struct {
	all   tally
	calls atomic.Int64

	mu     sync.Mutex
	limits map[uint32]int
}

// startLimitLoad runs the load on goroutines goroutines, at most perG calls
// each, until the returned stop is called (stop waits for them).
func startLimitLoad(r *replica, key string, goroutines, perG int) (l *limitLoad, stop func()) {
	l = &limitLoad{limits: map[uint32]int{}}
	stop = startLoad(func(stop <-chan struct{}) {
		load(goroutines, perG, stop, func(g, i int) {
			res := r.call(callTimeout, 1, entry{key, fmt.Sprintf("load-%d-%d", g, i)})
			l.all.add(res)
			if !res.ok() {
				l.all.note("%v", res)
			}
			l.mu.Lock()
			l.limits[res.Limit]++
			l.mu.Unlock()
			l.calls.Add(1)
			time.Sleep(time.Millisecond) // pacing: a steady load, not a wait for anything
		})
	})
	return l, stop
}

// byLimit is how many answers reported each limit so far.
func (l *limitLoad) byLimit() map[uint32]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.limits)
}
