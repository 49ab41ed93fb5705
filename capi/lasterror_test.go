package main

import (
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLastErrorThreads: errors of threads that have ended are let go (a
// caller that makes each call on a new thread grew the handle by an error
// a thread), a live thread's stays, and an error kept under a thread id
// that a later thread took again is not that thread's.
func TestLastErrorThreads(t *testing.T) {
	h := &handle{last: map[int]lastError{}}
	h.setError(lastError{msg: "mine"})
	var wg sync.WaitGroup
	for i := range 2000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Locked and never unlocked: the thread ends with the goroutine.
			runtime.LockOSThread()
			h.setError(lastError{msg: "short-lived " + string(rune('a'+i%26))})
		}()
		if i%50 == 0 {
			wg.Wait()
		}
	}
	wg.Wait()
	h.mu.Lock()
	n := len(h.last)
	h.mu.Unlock()
	if n > 4*pruneErrors {
		t.Errorf("%d errors kept after 2000 threads that ended", n)
	}
	// This goroutine may have moved to another thread: lock it to one and
	// record again.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h.setError(lastError{msg: "mine"})
	h.mu.Lock()
	mine := h.lastOf().msg
	h.last[unix.Gettid()] = lastError{msg: "an ended thread's", start: 1}
	reused := h.lastOf().msg
	h.mu.Unlock()
	if mine != "mine" || reused != "" {
		t.Errorf("this thread's error %q; under its id, an ended thread's shows as %q", mine, reused)
	}
}
