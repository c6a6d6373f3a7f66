package limiter

// LeasesOnly reports whether every request of batch is of a concurrency
// policy (Policy.Leases). A store evaluates such a batch request by
// request, in order, on its lease sets; pkg/limiter/leases sends the lease
// requests of a batch to it apart from the rate requests, and keeps the
// whole batch all or nothing.
func LeasesOnly(batch []Request) bool {
	for i := range batch {
		if p := batch[i].Policy; p == nil || !p.Leases() {
			return false
		}
	}
	return true
}
