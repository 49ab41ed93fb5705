package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lastError is what sz_last_error and sz_last_error_file report of a
// thread's last failed call: its message and the file it is about ("" for
// none), located when the call failed, while the error chain is at hand;
// start tells the thread that failed from a later one given its id (where
// known: /proc could be read then).
type lastError struct {
	msg, file string
	start     uint64
	known     bool
}

// pruneErrors is how many threads' errors a handle keeps before it looks
// for those of threads that have ended (then twice what it kept).
const pruneErrors = 64

// threadStart is when thread tid of this process started (in clock ticks
// after boot: field 22 of its /proc stat), 0 when it is not running; ok is
// false where that could not be learned (no /proc, or no file descriptor
// left: often why a call failed). A thread id is given again once its
// thread ends; its start, in ticks of 10 ms, is another unless the new
// thread started within the same tick.
func threadStart(tid int) (start uint64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, true
	}
	if err != nil {
		return 0, false
	}
	// The name, field 2, is in parentheses and may hold anything: fields
	// 3 on follow its last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return v, err == nil
}

// ended reports whether the error le, kept under thread id tid, is of a
// thread that has ended: known only where both starts could be read.
func ended(tid int, le lastError) bool {
	now, ok := threadStart(tid)
	return ok && le.known && now != le.start
}

// setError records the calling thread's last error (a C caller's thread:
// cgo runs an exported function on the thread that called it). Errors of
// threads that have ended are let go once pruneErrors (then twice what
// was kept) are held: a caller that runs each call on a new thread would
// otherwise grow the handle by a message a thread.
func (h *handle) setError(e lastError) {
	tid := unix.Gettid()
	e.start, e.known = threadStart(tid)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.last) >= max(h.prune, pruneErrors) {
		// A /proc read a kept error (rare: errors are few, and the
		// count to prune at doubles).
		for t, le := range h.last {
			if t != tid && ended(t, le) {
				delete(h.last, t)
			}
		}
		h.prune = 2 * len(h.last)
	}
	h.last[tid] = e
}

// lastOf is the calling thread's last error (h.mu held): none where the
// error kept under its id is an ended thread's.
func (h *handle) lastOf() lastError {
	tid := unix.Gettid()
	le, ok := h.last[tid]
	if !ok || ended(tid, le) {
		return lastError{}
	}
	return le
}
