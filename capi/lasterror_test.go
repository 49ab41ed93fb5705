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
	// This goroutine's thread is the same one from here on.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
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
	mine := h.lastOf().msg // recorded before the 2000 threads, kept
	h.mu.Unlock()
	if n > 4*pruneErrors {
		t.Errorf("%d errors kept after 2000 threads that ended", n)
	}
	h.mu.Lock()
	h.last[unix.Gettid()] = lastError{msg: "an ended thread's", start: 1, known: true}
	reused := h.lastOf().msg
	// One whose thread's start could not be read when it failed (no file
	// descriptor left) is shown, not taken for an ended thread's.
	h.last[unix.Gettid()] = lastError{msg: "start unknown"}
	unknown := h.lastOf().msg
	h.mu.Unlock()
	if mine != "mine" || reused != "" || unknown != "start unknown" {
		t.Errorf("this thread's error %q; under its id, an ended thread's shows as %q, one of an unknown start as %q", mine, reused, unknown)
	}
}
