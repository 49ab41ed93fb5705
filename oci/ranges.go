package oci

import (
	"sync"
	"time"
)

// Ranged GETs of a remote cache (Open) are sized from what they cost at
// the source, priced as the cost model prices a tensor: a fixed cost a
// request (here the time to its response's headers: a round trip and the
// server's first byte) and a rate (the bytes of its body a second on one
// connection). A read larger than a part is split into parts read in
// parallel, so that a large read is not held to one connection's rate;
// a part is large enough that its request's fixed cost is at most
// 1/partOverhead of its transfer.
const (
	// partOverhead: a part's body takes at least this many times its
	// request's fixed cost.
	partOverhead = 8
	// minRangePart and maxRangePart bound a part. Below 8 MiB, requests
	// cost more than their latency says: on loopback (2 cores, versitygw)
	// parts of 1-2 MiB, which latency alone would pick, read up to 10%
	// slower than 8 MiB ones. Above 64 MiB, a read waits on one
	// connection for long.
	minRangePart = 8 << 20
	maxRangePart = 64 << 20
	// defaultRangePart is the part size before any GET was measured.
	defaultRangePart = minRangePart
	// rateMinBody is the smallest body whose rate is counted: a smaller
	// one's time is mostly the scheduler's.
	rateMinBody = 256 << 10
	// maxRangeGETs bounds the ranged GETs a remote cache has in flight,
	// across all its reads.
	maxRangeGETs = 32
	// costWeight is the weight of the newest GET in the averages.
	costWeight = 0.2
)

// rangeCost learns what a ranged GET costs at one source and picks the
// part size. Safe for concurrent use.
type rangeCost struct {
	mu      sync.Mutex
	request float64 // seconds a request, to its response's headers
	rate    float64 // bytes a second of a body, one connection
	seen    bool    // request and rate hold a measurement
}

// observe records one GET: the time to its headers, and its body's size
// and the time the body took.
func (c *rangeCost) observe(headers time.Duration, body int64, took time.Duration) {
	if body < rateMinBody || took <= 0 {
		return
	}
	req, rate := headers.Seconds(), float64(body)/took.Seconds()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seen {
		c.request, c.rate, c.seen = req, rate, true
		return
	}
	c.request += costWeight * (req - c.request)
	c.rate += costWeight * (rate - c.rate)
}

// part is the size of a ranged GET: partOverhead times what a request's
// fixed cost would have moved at the body rate, rounded up to a MiB and
// held within [minRangePart, maxRangePart].
func (c *rangeCost) part() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seen {
		return defaultRangePart
	}
	return partFor(c.request, c.rate)
}

// partFor is part's size for a request cost (seconds) and a body rate
// (bytes a second).
func partFor(request, rate float64) int64 {
	n := partOverhead * request * rate
	switch {
	case n <= minRangePart:
		return minRangePart
	case n >= maxRangePart:
		return maxRangePart
	}
	const mib = 1 << 20
	return (int64(n) + mib - 1) / mib * mib
}

// splitRange cuts n bytes into parts of at most part bytes: a read of up
// to 1.5 parts stays whole (a short last part would cost a request for
// little), a longer one is cut into equal parts, the last taking the
// remainder.
func splitRange(n, part int64) []int64 {
	if n <= part+part/2 {
		return []int64{n}
	}
	k := (n + part - 1) / part
	size := (n + k - 1) / k
	out := make([]int64, 0, k)
	for left := n; left > 0; left -= size {
		out = append(out, min(size, left))
	}
	return out
}
