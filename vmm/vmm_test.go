package vmm_test

import (
	"errors"
	"testing"

	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/vmm"
)

func TestArenaLayout(t *testing.T) {
	eng := hostengine.New(1)
	defer eng.Close()
	specs := []vmm.Spec{{Name: "a", Size: 3}, {Name: "b", Size: 1000}, {Name: "empty"}, {Name: "c", Size: 70000}}
	a, err := vmm.New(eng, specs, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var end vmm.Ptr
	for i, b := range a.Bindings() {
		if b.Addr%vmm.Align != 0 || b.Addr < end || b.Index != i || b.State() != vmm.Evicted {
			t.Fatalf("binding %s at %#x (previous end %#x), state %v", b.Name, b.Addr, end, b.State())
		}
		end = b.Addr + vmm.Ptr(b.Size)
	}
	if uint64(end-a.Base()) > a.Size() || a.Size()%eng.Granularity() != 0 {
		t.Errorf("arena of %d bytes ends at offset %d", a.Size(), end-a.Base())
	}
	b, err := a.Lookup("c")
	if err != nil || b.Size != 70000 {
		t.Fatalf("lookup: %v", err)
	}
	if _, err := a.Lookup("nope"); !errors.Is(err, vmm.ErrUnknown) {
		t.Errorf("lookup of a missing tensor: %v", err)
	}
	if !b.CompareAndSet(vmm.Evicted, vmm.Resident) || b.CompareAndSet(vmm.Evicted, vmm.Loading) {
		t.Error("CompareAndSet")
	}
	a.Evict(b)
	if b.State() != vmm.Evicted {
		t.Error("evict")
	}
	if _, err := vmm.New(eng, []vmm.Spec{{Name: "x"}, {Name: "x"}}, 0); err == nil {
		t.Error("duplicate names accepted")
	}
}
