// Package statsdtest is a statsd server for tests: it listens on loopback
// (UDP or TCP), parses every line it receives and sums counters by name.
package statsdtest

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server records what it receives. It is safe for concurrent use.
type Server struct {
	// Addr is host:port of the listener.
	Addr string

	mu       sync.Mutex
	counters map[string]int64
	timers   map[string]int
	lines    []string
	changed  chan struct{}
}

// Start listens on 127.0.0.1 with protocol "udp" or "tcp"; the listener
// closes when the test ends.
func Start(t testing.TB, protocol string) *Server {
	t.Helper()
	s := &Server{counters: map[string]int64{}, timers: map[string]int{}, changed: make(chan struct{})}
	var wg sync.WaitGroup
	switch protocol {
	case "udp":
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.Addr = pc.LocalAddr().String()
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 65536)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				s.add(buf[:n])
			}
		}()
		t.Cleanup(func() { _ = pc.Close(); wg.Wait() })
	case "tcp":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.Addr = ln.Addr().String()
		var conns sync.Map
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				conns.Store(c, true)
				wg.Add(1)
				go func() {
					defer wg.Done()
					sc := bufio.NewScanner(c)
					for sc.Scan() {
						s.add(sc.Bytes())
					}
				}()
			}
		}()
		t.Cleanup(func() {
			_ = ln.Close()
			conns.Range(func(k, _ any) bool { _ = k.(net.Conn).Close(); return true })
			wg.Wait()
		})
	default:
		t.Fatalf("statsdtest: protocol %q", protocol)
	}
	return s
}

// add parses one datagram or line: "name:value|type[|@rate]" lines.
func (s *Server) add(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range bytes.Split(p, []byte{'\n'}) {
		line := string(l)
		if line == "" {
			continue
		}
		s.lines = append(s.lines, line)
		i := strings.LastIndexByte(line, ':')
		if i < 0 {
			continue
		}
		name, rest := line[:i], line[i+1:]
		parts := strings.Split(rest, "|")
		if len(parts) < 2 {
			continue
		}
		switch parts[1] {
		case "c":
			v, err := strconv.ParseInt(parts[0], 10, 64)
			if err == nil {
				s.counters[name] += v
			}
		case "ms":
			s.timers[name]++
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Counters returns the sums of the counters received so far.
func (s *Server) Counters() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counters)
}

// Timers returns how many samples of each timer were received.
func (s *Server) Timers() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.timers)
}

// Lines returns every line received.
func (s *Server) Lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// CheckOnlyCounters fails t for every counter received that want does not
// name.
func (s *Server) CheckOnlyCounters(t testing.TB, want map[string]int64) {
	t.Helper()
	for name := range s.Counters() {
		if _, ok := want[name]; !ok {
			t.Errorf("statsd: unexpected stat %q", name)
		}
	}
}

// CheckNoLineContains fails t for every line received that contains
// value: a request value must never reach statsd.
func (s *Server) CheckNoLineContains(t testing.TB, value string) {
	t.Helper()
	for _, line := range s.Lines() {
		if strings.Contains(line, value) {
			t.Errorf("statsd: a request value reached statsd: %q", line)
		}
	}
}

// WaitCounters waits until every counter of want has reached its value,
// failing t when one goes past it or when timeout passes first.
func (s *Server) WaitCounters(t testing.TB, want map[string]int64, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		changed := s.changed
		done, over := true, ""
		for k, v := range want {
			switch got := s.counters[k]; {
			case got > v:
				over = fmt.Sprintf("%s = %d, want %d", k, got, v)
			case got < v:
				done = false
			}
		}
		s.mu.Unlock()
		if over != "" {
			t.Fatalf("statsd: %s\n%s", over, s.dump())
		}
		if done {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("statsd: counters not reached within %v; want %v\n%s", timeout, want, s.dump())
		}
	}
}

func (s *Server) dump() string {
	c := s.Counters()
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("received counters:\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s = %d\n", k, c[k])
	}
	return b.String()
}

// RuleCounts are the per-rule counters of one stat key.
type RuleCounts struct{ Total, Within, Near, Over int64 }

// AddRule adds to want the four per-rule counters of key
// (ratelimit.service.rate_limit.<key>.total_hits, within_limit, near_limit,
// over_limit), each name followed by suffix (the extra tags, or "").
func AddRule(want map[string]int64, key, suffix string, c RuleCounts) {
	p := "ratelimit.service.rate_limit." + key + "."
	want[p+"total_hits"+suffix] = c.Total
	want[p+"within_limit"+suffix] = c.Within
	want[p+"near_limit"+suffix] = c.Near
	want[p+"over_limit"+suffix] = c.Over
}
