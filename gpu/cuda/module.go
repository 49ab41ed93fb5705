package cuda

import (
	"runtime"
	"unsafe"
)

// LoadModule loads a module from a fatbin, cubin or PTX image.
func (c *Context) LoadModule(image []byte) (Module, error) {
	// The driver reads the image during the call only; a NUL-terminated
	// copy keeps PTX text valid too.
	img := append(append([]byte(nil), image...), 0)
	var m Module
	var pin runtime.Pinner
	pin.Pin(&img[0])
	defer pin.Unpin()
	return m, c.call("cuModuleLoadData", func() Result { return c.lib.cuModuleLoadData(&m, unsafe.Pointer(&img[0])) })
}

// UnloadModule unloads a module.
func (c *Context) UnloadModule(m Module) error {
	return c.call("cuModuleUnload", func() Result { return c.lib.cuModuleUnload(m) })
}

// Function looks up a kernel by its (extern "C") name.
func (c *Context) Function(m Module, name string) (Function, error) {
	var f Function
	n := cString(name)
	return f, c.call("cuModuleGetFunction("+name+")", func() Result { return c.lib.cuModuleGetFunction(&f, m, n) })
}

// MaxActiveBlocks returns how many blocks of f with the given block size
// and dynamic shared memory fit on one multiprocessor.
func (c *Context) MaxActiveBlocks(f Function, blockSize int, dynSmem uint64) (int, error) {
	var n int32
	err := c.call("cuOccupancyMaxActiveBlocksPerMultiprocessor", func() Result {
		return c.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, int32(blockSize), dynSmem)
	})
	return int(n), err
}

// Kernel attributes (CUfunction_attribute).
const (
	FuncAttrMaxThreadsPerBlock    = 0 // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: the kernel's launch bound
	FuncAttrSharedBytes           = 1 // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: its static shared memory
	FuncAttrLocalBytes            = 3 // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: spills and stack a thread
	FuncAttrNumRegs               = 4 // CU_FUNC_ATTRIBUTE_NUM_REGS
	FuncAttrMaxDynamicSharedBytes = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	FuncAttrSharedCarveout        = 9 // CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, percent
)

// FuncAttribute returns a kernel attribute.
func (c *Context) FuncAttribute(f Function, attr int) (int, error) {
	var v int32
	err := c.call("cuFuncGetAttribute", func() Result { return c.lib.cuFuncGetAttribute(&v, int32(attr), f) })
	return int(v), err
}

// SetFuncAttribute sets a kernel attribute.
func (c *Context) SetFuncAttribute(f Function, attr, value int) error {
	return c.call("cuFuncSetAttribute", func() Result { return c.lib.cuFuncSetAttribute(f, int32(attr), int32(value)) })
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Launch launches f on s. params holds a pointer to each kernel argument,
// in order; the pointed-to values are copied by the driver during the call.
func (c *Context) Launch(f Function, grid, block Dim3, smem uint32, s Stream, params ...unsafe.Pointer) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	var argv unsafe.Pointer
	if len(params) > 0 {
		for _, p := range params {
			pin.Pin(p)
		}
		arr := make([]unsafe.Pointer, len(params))
		copy(arr, params)
		pin.Pin(&arr[0])
		argv = unsafe.Pointer(&arr[0])
	}
	return c.call("cuLaunchKernel", func() Result {
		return c.lib.cuLaunchKernel(f, grid.X, max(grid.Y, 1), max(grid.Z, 1), block.X, max(block.Y, 1), max(block.Z, 1), smem, s, argv, nil)
	})
}
