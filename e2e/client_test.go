package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// domain is the rate-limit domain of every rule file in this suite.
const domain = "e2e"

// callTimeout is the deadline of an ordinary call (as Envoy's filter
// `timeout`, but roomy: the binary may run with the race detector).
const callTimeout = 5 * time.Second

// result is what Envoy sees of one ShouldRateLimit call.
type result struct {
	Code     rlsv3.RateLimitResponse_Code // UNKNOWN when Err is set
	Err      error                        // the gRPC error, if any
	Headers  map[string]string            // response_headers_to_add
	Limit    uint32                       // statuses[0].current_limit.requests_per_unit
	Metadata map[string]any               // dynamic_metadata as JSON values (nil: none)
	Remain   uint32                       // statuses[0].limit_remaining
	Remains  []uint32                     // every status's limit_remaining
	Took     time.Duration                // as the client measured it
	Deadline time.Duration                // the deadline the client set
}

// ok is an answered OK; over an answered OVER_LIMIT.
func (r result) ok() bool   { return r.Err == nil && r.Code == rlsv3.RateLimitResponse_OK }
func (r result) over() bool { return r.Err == nil && r.Code == rlsv3.RateLimitResponse_OVER_LIMIT }

func (r result) String() string {
	if r.Err != nil {
		return fmt.Sprintf("error %v after %v", r.Err, r.Took)
	}
	return fmt.Sprintf("%v limit=%d headers=%v after %v", r.Code, r.Limit, r.Headers, r.Took)
}

// entry is one descriptor entry (key, value).
type entry struct{ Key, Value string }

// dial connects a gRPC client to addr with creds (plaintext when nil); the
// connection closes when the test ends.
func dial(t testing.TB, addr string, creds credentials.TransportCredentials) (*grpc.ClientConn, rlsv3.RateLimitServiceClient) {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatalf("e2e: gRPC client for %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, rlsv3.NewRateLimitServiceClient(conn)
}

// fresh returns a copy of r that calls over a new gRPC connection with
// creds (plaintext when nil).
func (r *replica) fresh(t testing.TB, creds credentials.TransportCredentials) *replica {
	t.Helper()
	f := *r
	f.conn, f.rls = dial(t, r.grpcAddr, creds)
	return &f
}

// call sends one ShouldRateLimit as Envoy does: the domain, one descriptor
// with the given entries, hits_addend hits, and a deadline of timeout.
func (r *replica) call(timeout time.Duration, hits uint32, entries ...entry) result {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range entries {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	return r.send(timeout, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}, HitsAddend: hits})
}

// callMany is call with one descriptor per entry: every entry its own
// limit of the one request.
func (r *replica) callMany(timeout time.Duration, hits uint32, entries ...entry) result {
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, e := range entries {
		req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: e.Key, Value: e.Value}}})
	}
	return r.send(timeout, req)
}

// send sends req with a deadline of timeout and returns what Envoy sees of
// the answer.
func (r *replica) send(timeout time.Duration, req *rlsv3.RateLimitRequest) result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	resp, err := r.rls.ShouldRateLimit(ctx, req)
	res := result{Took: time.Since(start), Deadline: timeout, Err: err}
	if err != nil {
		return res
	}
	res.Code = resp.GetOverallCode()
	res.Headers = map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		res.Headers[h.GetKey()] = h.GetValue()
	}
	if st := resp.GetStatuses(); len(st) > 0 {
		res.Limit = st[0].GetCurrentLimit().GetRequestsPerUnit()
		res.Remain = st[0].GetLimitRemaining()
		for _, x := range st {
			res.Remains = append(res.Remains, x.GetLimitRemaining())
		}
	}
	if md := resp.GetDynamicMetadata(); md != nil {
		res.Metadata = md.AsMap()
	}
	return res
}

// mustCall is call with callTimeout that fails the test on a gRPC error.
func (r *replica) mustCall(t *testing.T, entries ...entry) result {
	t.Helper()
	res := r.call(callTimeout, 1, entries...)
	if res.Err != nil {
		t.Fatalf("e2e: %s: %v", r.name, res.Err)
	}
	return res
}

// checkAdmits makes calls calls of e on r: the first limit must be
// answered OK, the others OVER_LIMIT. It returns the answers.
func (r *replica) checkAdmits(t *testing.T, e entry, limit, calls int) []result {
	t.Helper()
	got := make([]result, calls)
	for i := range got {
		got[i] = r.mustCall(t, e)
		if want := i < limit; got[i].ok() != want || !want && !got[i].over() {
			t.Fatalf("%s: call %d of %s: %v, want ok=%v", r.name, i+1, e.Key, got[i], want)
		}
	}
	return got
}

// unique returns prefix plus a random suffix: a subject no earlier run used,
// even against an external REDIS_ADDR.
func unique(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// tally counts results by kind, safely from many goroutines.
type tally struct {
	mu      sync.Mutex
	ok      int
	over    int
	errs    map[codes.Code]int
	samples []string // the first few unexpected results
	late    int      // calls that outlived their deadline (beyond tolerance)
	slowest time.Duration
}

// deadlineTolerance is how much later than its deadline a call may return
// (client-side scheduling, the race detector).
const deadlineTolerance = 150 * time.Millisecond

func (t *tally) add(r result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case r.ok():
		t.ok++
	case r.over():
		t.over++
	default:
		if t.errs == nil {
			t.errs = map[codes.Code]int{}
		}
		t.errs[status.Code(r.Err)]++
	}
	if r.Took > t.slowest {
		t.slowest = r.Took
	}
	if r.Took > r.Deadline+deadlineTolerance {
		t.late++
	}
}

func (t *tally) note(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.samples) < 10 {
		t.samples = append(t.samples, fmt.Sprintf(format, args...))
	}
}

func (t *tally) failed() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.errs {
		n += c
	}
	return n
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("ok=%d over_limit=%d errors=%v late=%d slowest=%v unexpected=[%s]",
		t.ok, t.over, t.errs, t.late, t.slowest, strings.Join(t.samples, "; "))
}

// load runs fn on n goroutines until stop is closed or each has made max
// calls, and returns when all have returned. fn gets the goroutine and call
// indexes.
func load(n, max int, stop <-chan struct{}, fn func(g, i int)) {
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < max; i++ {
				select {
				case <-stop:
					return
				default:
				}
				fn(g, i)
			}
		}()
	}
	wg.Wait()
}

// startLoad runs each fn on its own goroutine, handing it a channel that
// closes when the returned stop is called. stop waits for every fn to
// return; calling it again does nothing, so it can be both deferred and
// called where the test wants the load to end.
func startLoad(fns ...func(stop <-chan struct{})) (stop func()) {
	ch := make(chan struct{})
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(ch)
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(ch)
			wg.Wait()
		})
	}
}

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
