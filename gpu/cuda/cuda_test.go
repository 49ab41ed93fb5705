package cuda

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// requireGPU opens the driver and device 0, or skips with the reason.
func requireGPU(t *testing.T) *Context {
	t.Helper()
	l, err := Open()
	if errors.Is(err, ErrNoDriver) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestNoDriver: a library that is not there is ErrNoDriver, and the
// message keeps the loader's reason every time, with other goroutines
// busy (dlerror's message is per thread: read on another, it was empty
// about one time in eight).
func TestNoDriver(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	for range runtime.GOMAXPROCS(0) * 2 {
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	for range 2000 {
		_, err := Open(WithLibraryPath("/nonexistent/libcuda.so.1"))
		if !errors.Is(err, ErrNoDriver) {
			t.Fatalf("missing library: %v", err)
		}
		if !strings.Contains(err.Error(), "No such file") {
			t.Fatalf("missing library: %q, want the loader's reason", err)
		}
	}
}

func TestDriverBasics(t *testing.T) {
	c := requireGPU(t)
	name, err := c.Name()
	if err != nil {
		t.Fatal(err)
	}
	sms, _ := c.Attribute(AttrMultiprocessorCount)
	v, _ := c.Library().DriverVersion()
	t.Logf("%s, %d SMs, driver %d", name, sms, v)
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer c.DestroyStream(s)
	host, err := c.HostAlloc(1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.FreeHost(host)
	for i := range host {
		host[i] = byte(i * 7)
	}
	d, err := c.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(d)
	back := make([]byte, 1<<20)
	e, _ := c.NewEvent(EventDefault)
	defer c.DestroyEvent(e)
	if err := c.CopyHtoDAsync(d, host, s); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoHAsync(back, d, s); err != nil {
		t.Fatal(err)
	}
	c.Record(e, s)
	if err := c.EventSynchronize(e); err != nil {
		t.Fatal(err)
	}
	if done, err := c.Query(e); !done || err != nil {
		t.Fatalf("query after sync: %v %v", done, err)
	}
	if !bytes.Equal(host, back) {
		t.Fatal("round trip through the device differs")
	}
	// A bad call is an Error naming the call and the CUDA error.
	err = c.Free(DevicePtr(12345))
	var ce *Error
	if !errors.As(err, &ce) || ce.Name == "" || ce.Call != "cuMemFree" {
		t.Errorf("bad free: %v", err)
	}
}

func TestVMM(t *testing.T) {
	c := requireGPU(t)
	g, err := c.Granularity(false)
	if err != nil || g == 0 {
		t.Fatalf("granularity %d: %v", g, err)
	}
	va, err := c.AddressReserve(4*g, g)
	if err != nil {
		t.Fatal(err)
	}
	defer c.AddressFree(va, 4*g)
	h, err := c.MemCreate(2 * g)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MemMap(va+DevicePtr(g), 2*g, h); err != nil {
		t.Fatal(err)
	}
	s, _ := c.NewStream()
	defer c.DestroyStream(s)
	if err := c.MemsetD8Async(va+DevicePtr(g), 0x5a, 2*g, s); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	c.CopyDtoHAsync(b, va+DevicePtr(3*g-16), s)
	c.StreamSynchronize(s)
	if b[0] != 0x5a || b[15] != 0x5a {
		t.Errorf("mapped range reads %x", b)
	}
	if err := c.MemUnmap(va+DevicePtr(g), 2*g); err != nil {
		t.Fatal(err)
	}
	if err := c.MemRelease(h); err != nil {
		t.Fatal(err)
	}
}
