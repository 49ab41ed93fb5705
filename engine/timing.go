package engine

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

// Interval is a span of device work, as offsets from a common origin.
type Interval struct{ Start, End time.Duration }

// BusyTimes returns the union lengths of copies and decodes and the part
// of the decodes' union outside the copies'.
func BusyTimes(copies, decodes []Interval) DeviceTimes {
	cu, du := union(copies), union(decodes)
	return DeviceTimes{Copy: length(cu), Decode: length(du), DecodeAlone: length(du) - length(intersect(cu, du))}
}

// union merges intervals into sorted, disjoint ones.
func union(in []Interval) []Interval {
	s := append([]Interval(nil), in...)
	sort.Slice(s, func(i, j int) bool { return s[i].Start < s[j].Start })
	var out []Interval
	for _, iv := range s {
		if iv.End <= iv.Start {
			continue
		}
		if n := len(out); n > 0 && iv.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, iv.End)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// intersect returns the overlap of two sorted, disjoint interval lists.
func intersect(a, b []Interval) []Interval {
	var out []Interval
	for i, j := 0, 0; i < len(a) && j < len(b); {
		s, e := max(a[i].Start, b[j].Start), min(a[i].End, b[j].End)
		if s < e {
			out = append(out, Interval{s, e})
		}
		if a[i].End < b[j].End {
			i++
		} else {
			j++
		}
	}
	return out
}

func length(s []Interval) (d time.Duration) {
	for _, iv := range s {
		d += iv.End - iv.Start
	}
	return d
}
