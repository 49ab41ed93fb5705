package transport

// Resident runs (RawOptions.ResidentRuns), the raw side of resident packs
// (resident_packs.go): bindings of one batch that lie one after another
// in the arena keep their resident bytes in one pinned region, at the
// same distances as in the arena, so that a re-fault of all of them is
// one copy into the arena (the bytes between them are alignment padding,
// which belongs to no binding).

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/vmm"
)

// rawRun is a pinned region holding the resident bytes of bindings side
// by side in the arena, the first at base.
type rawRun struct {
	buf     []byte
	base    vmm.Ptr
	members []*vmm.Binding
}

// span is how many bytes of the arena a run covers.
func (u *rawRun) span() uint64 {
	last := u.members[len(u.members)-1]
	return uint64(last.Addr-u.base) + last.Size
}

// place returns b's bytes in the run's region.
func (u *rawRun) place(b *vmm.Binding) []byte {
	off := uint64(b.Addr - u.base)
	return u.buf[off : off+b.Size : off+b.Size]
}

// planRuns gives the bindings of a batch that are neither resident nor in
// a run yet runs of up to residentPackBytes, where they lie one after
// another in the arena.
func (r *Raw) planRuns(bs []*vmm.Binding) error {
	var todo []*vmm.Binding
	r.mu.Lock()
	for _, b := range bs {
		_, resident := r.resident[b]
		_, placed := r.runs[b]
		if b.Size > 0 && !resident && !placed {
			todo = append(todo, b)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(todo, func(a, b *vmm.Binding) int { return cmp.Compare(a.Addr, b.Addr) })
	for len(todo) > 0 {
		n := 1
		for n < len(todo) {
			prev, b := todo[n-1], todo[n]
			next := (uint64(prev.Addr) + prev.Size + vmm.Align - 1) &^ (vmm.Align - 1)
			if uint64(b.Addr) != next || uint64(b.Addr-todo[0].Addr)+b.Size > residentPackBytes {
				break
			}
			n++
		}
		if n < 2 {
			todo = todo[1:]
			continue
		}
		u := &rawRun{base: todo[0].Addr, members: slices.Clone(todo[:n])}
		buf, err := r.res.alloc(align16(u.span()))
		if err != nil {
			return err
		}
		u.buf = buf
		r.mu.Lock()
		for _, b := range u.members {
			r.runs[b] = u
		}
		r.mu.Unlock()
		todo = todo[n:]
	}
	return nil
}

// wholeRuns takes out of bs (indices idx) the bindings whose runs are
// whole in the batch, every member resident, and returns the runs with
// the members' indices.
func (r *Raw) wholeRuns(bs []*vmm.Binding, idx []int) (rest []int, runs []*rawRun, members [][]int) {
	byRun := map[*rawRun][]int{}
	r.mu.Lock()
	for _, i := range idx {
		b := bs[i]
		u, ok := r.runs[b]
		if _, resident := r.resident[b]; !ok || !resident {
			rest = append(rest, i)
			continue
		}
		byRun[u] = append(byRun[u], i)
	}
	r.mu.Unlock()
	for u, is := range byRun {
		seen := map[*vmm.Binding]bool{}
		for _, i := range is {
			seen[bs[i]] = true
		}
		if len(seen) != len(u.members) || len(is) != len(u.members) {
			rest = append(rest, is...)
			continue
		}
		runs, members = append(runs, u), append(members, is)
	}
	return rest, runs, members
}

// uploadRuns plans runs for the batch's bindings other than small ones,
// submits each run that is whole in it with one copy, and marks its
// members in inRun with their fences in out. A run that cannot be pinned
// is left unplanned: its bindings take buffers of their own.
func (r *Raw) uploadRuns(ctx context.Context, bs []*vmm.Binding, isSmall, inRun []bool, out []Fence) {
	var idx []int
	var cand []*vmm.Binding
	for i, b := range bs {
		if !isSmall[i] {
			idx, cand = append(idx, i), append(cand, b)
		}
	}
	if r.planRuns(cand) != nil {
		return
	}
	_, runs, members := r.wholeRuns(bs, idx)
	for k, u := range runs {
		err := ctx.Err()
		var ev engine.Event
		if err == nil {
			ev, err = r.submitRun(u)
		}
		for _, i := range members[k] {
			inRun[i] = true
			if err != nil {
				out[i] = errFence{&Error{Tensor: bs[i].Name, Err: err}}
			} else {
				out[i] = &wrapFence{ev, bs[i].Name}
			}
		}
	}
}

// submitRun copies a run's region into the arena with one submission.
func (r *Raw) submitRun(u *rawRun) (engine.Event, error) {
	t0 := time.Now()
	n := u.span()
	ev, err := r.eng.Submit(r.streams.pick(r.eng), engine.Work{Dst: u.base, Src: u.buf[:n]})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.stats.Bytes += n
	r.stats.Submit += time.Since(t0)
	r.mu.Unlock()
	return ev, nil
}
