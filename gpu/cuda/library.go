package cuda

import (
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DefaultLibraryPath is the driver library loaded unless WithLibraryPath
// or the SPLITZIP_LIBCUDA environment variable names another.
const DefaultLibraryPath = "libcuda.so.1"

// Handles of driver objects.
type (
	Device    int32
	Ctx       uintptr
	Stream    uintptr
	Event     uintptr
	Module    uintptr
	Function  uintptr
	DevicePtr uint64
	MemHandle uint64
)

// Library is the loaded driver: the handle and every function this
// package uses, resolved by versioned name.
type Library struct {
	handle uintptr

	cuGetErrorName        func(Result, **byte) Result
	cuGetErrorString      func(Result, **byte) Result
	cuInit                func(uint32) Result
	cuDriverGetVersion    func(*int32) Result
	cuDeviceGetCount      func(*int32) Result
	cuDeviceGet           func(*Device, int32) Result
	cuDeviceGetName       func(*byte, int32, Device) Result
	cuDeviceGetAttribute  func(*int32, int32, Device) Result
	cuDeviceTotalMem      func(*uint64, Device) Result `cuda:"cuDeviceTotalMem_v2"`
	cuDeviceCanAccessPeer func(*int32, Device, Device) Result

	cuDevicePrimaryCtxRetain  func(*Ctx, Device) Result
	cuDevicePrimaryCtxRelease func(Device) Result `cuda:"cuDevicePrimaryCtxRelease_v2"`
	cuCtxSetCurrent           func(Ctx) Result
	cuCtxSynchronize          func() Result

	cuStreamCreate      func(*Stream, uint32) Result
	cuStreamDestroy     func(Stream) Result `cuda:"cuStreamDestroy_v2"`
	cuStreamSynchronize func(Stream) Result
	cuStreamWaitEvent   func(Stream, Event, uint32) Result

	cuEventCreate      func(*Event, uint32) Result
	cuEventDestroy     func(Event) Result `cuda:"cuEventDestroy_v2"`
	cuEventRecord      func(Event, Stream) Result
	cuEventQuery       func(Event) Result
	cuEventSynchronize func(Event) Result
	cuEventElapsedTime func(*float32, Event, Event) Result `cuda:"cuEventElapsedTime_v2,cuEventElapsedTime"`

	cuMemAlloc          func(*DevicePtr, uint64) Result `cuda:"cuMemAlloc_v2"`
	cuMemFree           func(DevicePtr) Result          `cuda:"cuMemFree_v2"`
	cuMemGetInfo        func(*uint64, *uint64) Result   `cuda:"cuMemGetInfo_v2"`
	cuMemsetD8Async     func(DevicePtr, uint8, uint64, Stream) Result
	cuMemcpyHtoDAsync   func(DevicePtr, unsafe.Pointer, uint64, Stream) Result `cuda:"cuMemcpyHtoDAsync_v2"`
	cuMemcpyDtoHAsync   func(unsafe.Pointer, DevicePtr, uint64, Stream) Result `cuda:"cuMemcpyDtoHAsync_v2"`
	cuMemcpyDtoDAsync   func(DevicePtr, DevicePtr, uint64, Stream) Result      `cuda:"cuMemcpyDtoDAsync_v2"`
	cuMemcpyPeerAsync   func(DevicePtr, Ctx, DevicePtr, Ctx, uint64, Stream) Result
	cuMemHostAlloc      func(*unsafe.Pointer, uint64, uint32) Result
	cuMemFreeHost       func(unsafe.Pointer) Result
	cuMemHostRegister   func(unsafe.Pointer, uint64, uint32) Result `cuda:"cuMemHostRegister_v2"`
	cuMemHostUnregister func(unsafe.Pointer) Result
	// cuMemcpyBatchAsync (CUDA 13's signature, without failIdx) is
	// optional: older drivers lack it, and CopyBatchAsync then fails
	// with ErrNoBatchCopy.
	cuMemcpyBatchAsync func(*DevicePtr, *DevicePtr, *uint64, uint64, *memcpyAttributes, *uint64, uint64, Stream) Result `cuda:"cuMemcpyBatchAsync_v2" optional:"true"`

	cuModuleLoadData                            func(*Module, unsafe.Pointer) Result
	cuModuleUnload                              func(Module) Result
	cuModuleGetFunction                         func(*Function, Module, *byte) Result
	cuLaunchKernel                              func(Function, uint32, uint32, uint32, uint32, uint32, uint32, uint32, Stream, unsafe.Pointer, unsafe.Pointer) Result
	cuOccupancyMaxActiveBlocksPerMultiprocessor func(*int32, Function, int32, uint64) Result
	cuFuncSetAttribute                          func(Function, int32, int32) Result
	cuFuncGetAttribute                          func(*int32, int32, Function) Result

	cuMemAddressReserve           func(*DevicePtr, uint64, uint64, DevicePtr, uint64) Result
	cuMemAddressFree              func(DevicePtr, uint64) Result
	cuMemCreate                   func(*MemHandle, uint64, unsafe.Pointer, uint64) Result
	cuMemRelease                  func(MemHandle) Result
	cuMemMap                      func(DevicePtr, uint64, uint64, MemHandle, uint64) Result
	cuMemUnmap                    func(DevicePtr, uint64) Result
	cuMemSetAccess                func(DevicePtr, uint64, unsafe.Pointer, uint64) Result
	cuMemGetAllocationGranularity func(*uint64, unsafe.Pointer, int32) Result
}

// Option configures Open.
type Option func(*openOptions) error

type openOptions struct{ path string }

// WithLibraryPath loads the driver from path instead of DefaultLibraryPath.
func WithLibraryPath(path string) Option {
	return func(o *openOptions) error {
		if path == "" {
			return fmt.Errorf("cuda: empty library path")
		}
		o.path = path
		return nil
	}
}

var (
	libMu    sync.Mutex
	libCache = map[string]*Library{}
)

// Open loads the driver library, resolves its symbols and initializes the
// driver. It returns an error matching ErrNoDriver when the library cannot
// be loaded or no device is present. Libraries are loaded once per path
// and shared.
func Open(opts ...Option) (*Library, error) {
	o := openOptions{path: DefaultLibraryPath}
	if p := os.Getenv("SPLITZIP_LIBCUDA"); p != "" {
		o.path = p
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	libMu.Lock()
	defer libMu.Unlock()
	if l, ok := libCache[o.path]; ok {
		return l, nil
	}
	// dlerror's message is the calling thread's: read on another, it is
	// empty.
	runtime.LockOSThread()
	h, err := purego.Dlopen(o.path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	runtime.UnlockOSThread()
	if err != nil {
		// dlerror names the file it could not open; say it once.
		msg := err.Error()
		if strings.TrimSpace(msg) == "" {
			msg = "the dynamic loader gave no reason"
		}
		if !strings.HasPrefix(msg, o.path) {
			msg = "loading " + o.path + ": " + msg
		}
		return nil, fmt.Errorf("%w: %s", ErrNoDriver, msg)
	}
	l := &Library{handle: h}
	if err := l.resolve(); err != nil {
		purego.Dlclose(h)
		return nil, err
	}
	if err := l.check("cuInit", l.cuInit(0)); err != nil {
		purego.Dlclose(h)
		return nil, fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	var n int32
	if err := l.check("cuDeviceGetCount", l.cuDeviceGetCount(&n)); err != nil || n == 0 {
		purego.Dlclose(h)
		return nil, fmt.Errorf("%w: %d devices (%v)", ErrNoDriver, n, err)
	}
	libCache[o.path] = l
	return l, nil
}

// resolve looks up every function field by its name, or by the names in
// its cuda tag (first found wins), and fails naming a missing symbol
// before any is registered.
func (l *Library) resolve() error {
	v := reflect.ValueOf(l).Elem()
	t := v.Type()
	syms := make([]uintptr, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type.Kind() != reflect.Func {
			continue
		}
		names := []string{f.Name}
		if tag := f.Tag.Get("cuda"); tag != "" {
			names = splitComma(tag)
		}
		for _, n := range names {
			if s, err := purego.Dlsym(l.handle, n); err == nil && s != 0 {
				syms[i] = s
				break
			}
		}
		if syms[i] == 0 && f.Tag.Get("optional") != "true" {
			return fmt.Errorf("%w: the driver lacks %v (too old?)", ErrNoDriver, names)
		}
	}
	for i := range t.NumField() {
		if syms[i] != 0 {
			// The fields are unexported; reach them through their address.
			fp := reflect.NewAt(t.Field(i).Type, unsafe.Pointer(v.Field(i).UnsafeAddr())).Interface()
			purego.RegisterFunc(fp, syms[i])
		}
	}
	return nil
}

// DriverVersion returns the driver's CUDA version, e.g. 13000.
func (l *Library) DriverVersion() (int, error) {
	var v int32
	return int(v), l.check("cuDriverGetVersion", l.cuDriverGetVersion(&v))
}

// DeviceCount returns the number of devices.
func (l *Library) DeviceCount() (int, error) {
	var n int32
	return int(n), l.check("cuDeviceGetCount", l.cuDeviceGetCount(&n))
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func goString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}

func cString(s string) *byte {
	b := append([]byte(s), 0)
	return &b[0]
}
