package cuda

import (
	"unsafe"
)

// allocProp mirrors CUmemAllocationProp (32 bytes).
type allocProp struct {
	Type          int32 // CU_MEM_ALLOCATION_TYPE_PINNED = 1
	HandleTypes   int32 // none
	LocationType  int32 // CU_MEM_LOCATION_TYPE_DEVICE = 1
	LocationID    int32
	Win32Metadata uintptr
	AllocFlags    [8]byte
}

// accessDesc mirrors CUmemAccessDesc (12 bytes).
type accessDesc struct {
	LocationType int32
	LocationID   int32
	Flags        int32 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
}

func (c *Context) prop() *allocProp {
	return &allocProp{Type: 1, LocationType: 1, LocationID: int32(c.dev)}
}

// Granularity returns the minimum (recommended when rec is set) size and
// alignment of physical allocations on the device.
func (c *Context) Granularity(rec bool) (uint64, error) {
	var g uint64
	opt := int32(0)
	if rec {
		opt = 1
	}
	p := c.prop()
	return g, c.call("cuMemGetAllocationGranularity", func() Result {
		return c.lib.cuMemGetAllocationGranularity(&g, unsafe.Pointer(p), opt)
	})
}

// AddressReserve reserves a virtual address range.
func (c *Context) AddressReserve(size, align uint64) (DevicePtr, error) {
	var p DevicePtr
	return p, c.call("cuMemAddressReserve", func() Result { return c.lib.cuMemAddressReserve(&p, size, align, 0, 0) })
}

// AddressFree frees a reserved range.
func (c *Context) AddressFree(p DevicePtr, size uint64) error {
	return c.call("cuMemAddressFree", func() Result { return c.lib.cuMemAddressFree(p, size) })
}

// MemCreate creates a physical allocation of size bytes on the device.
func (c *Context) MemCreate(size uint64) (MemHandle, error) {
	var h MemHandle
	p := c.prop()
	return h, c.call("cuMemCreate", func() Result { return c.lib.cuMemCreate(&h, size, unsafe.Pointer(p), 0) })
}

// MemRelease releases a physical allocation.
func (c *Context) MemRelease(h MemHandle) error {
	return c.call("cuMemRelease", func() Result { return c.lib.cuMemRelease(h) })
}

// MemMap maps h at p and grants read and write access to the device and
// to the devices of peers (other contexts that copy from or to it).
func (c *Context) MemMap(p DevicePtr, size uint64, h MemHandle, peers ...*Context) error {
	if err := c.call("cuMemMap", func() Result { return c.lib.cuMemMap(p, size, 0, h, 0) }); err != nil {
		return err
	}
	ds := []accessDesc{{LocationType: 1, LocationID: int32(c.dev), Flags: 3}}
	for _, o := range peers {
		if o.dev != c.dev {
			ds = append(ds, accessDesc{LocationType: 1, LocationID: int32(o.dev), Flags: 3})
		}
	}
	return c.call("cuMemSetAccess", func() Result {
		return c.lib.cuMemSetAccess(p, size, unsafe.Pointer(&ds[0]), uint64(len(ds)))
	})
}

// MemUnmap unmaps a range.
func (c *Context) MemUnmap(p DevicePtr, size uint64) error {
	return c.call("cuMemUnmap", func() Result { return c.lib.cuMemUnmap(p, size) })
}
