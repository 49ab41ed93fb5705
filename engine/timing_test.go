package engine

import (
	"testing"
	"time"
)

func TestBusyTimes(t *testing.T) {
	ms := time.Millisecond
	iv := func(a, b int) Interval { return Interval{time.Duration(a) * ms, time.Duration(b) * ms} }
	copies := []Interval{iv(0, 10), iv(5, 12), iv(20, 30), iv(29, 31)}  // union: 0-12, 20-31
	decodes := []Interval{iv(11, 14), iv(25, 26), iv(40, 41), iv(3, 3)} // union: 11-14, 25-26, 40-41
	got := BusyTimes(copies, decodes)
	want := DeviceTimes{Copy: 23 * ms, Decode: 5 * ms, DecodeAlone: 3 * ms} // 12-14 and 40-41
	if got != want {
		t.Errorf("BusyTimes = %+v, want %+v", got, want)
	}
	if z := BusyTimes(nil, nil); z != (DeviceTimes{}) {
		t.Errorf("no work: %+v", z)
	}
}
