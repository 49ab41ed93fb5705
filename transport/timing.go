package transport

import (
	"sort"
	"time"
)

// DeviceTimes is how long an engine's device work kept the device busy,
// from its own timestamps: the time during which at least one copy (or one
// decode) was running, whatever the number of streams.
type DeviceTimes struct {
	Copy   time.Duration `json:"copy_busy_ns"`
	Decode time.Duration `json:"decode_busy_ns"`
	// DecodeAlone is the part of Decode with no copy running: decoding
	// that the next transfer had to wait for, or had nothing to overlap.
	DecodeAlone time.Duration `json:"decode_alone_ns"`
}

// Timer is implemented by engines that time their device work.
type Timer interface {
	// StartTiming starts timing copies and decodes (and scatters);
	// TakeTimes, once the timed work has completed, returns its busy
	// times and stops timing.
	StartTiming() error
	TakeTimes() (DeviceTimes, error)
}

// interval is a span of device work, as offsets from a common origin.
type interval struct{ start, end time.Duration }

// busyTimes returns the union lengths of copies and decodes and the part
// of the decodes' union outside the copies'.
func busyTimes(copies, decodes []interval) DeviceTimes {
	cu, du := union(copies), union(decodes)
	return DeviceTimes{Copy: length(cu), Decode: length(du), DecodeAlone: length(du) - length(intersect(cu, du))}
}

// union merges intervals into sorted, disjoint ones.
func union(in []interval) []interval {
	s := append([]interval(nil), in...)
	sort.Slice(s, func(i, j int) bool { return s[i].start < s[j].start })
	var out []interval
	for _, iv := range s {
		if iv.end <= iv.start {
			continue
		}
		if n := len(out); n > 0 && iv.start <= out[n-1].end {
			out[n-1].end = max(out[n-1].end, iv.end)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// intersect returns the overlap of two sorted, disjoint interval lists.
func intersect(a, b []interval) []interval {
	var out []interval
	for i, j := 0, 0; i < len(a) && j < len(b); {
		s, e := max(a[i].start, b[j].start), min(a[i].end, b[j].end)
		if s < e {
			out = append(out, interval{s, e})
		}
		if a[i].end < b[j].end {
			i++
		} else {
			j++
		}
	}
	return out
}

func length(s []interval) (d time.Duration) {
	for _, iv := range s {
		d += iv.end - iv.start
	}
	return d
}
