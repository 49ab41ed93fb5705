package load

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/splitzip/splitzip/internal/fixture"
)

// TestCUDALoad loads through both transports into a VMM arena on the GPU
// and reads everything back.
func TestCUDALoad(t *testing.T) {
	eng := fixture.RequireCUDA(t, 2)
	c, src := llama(t)
	for _, o := range []runs{
		{Options{Raw: true, Check: true}, 2},
		{Options{Check: true}, 2},
		{Options{Resident: true, Check: true}, 3},
		// The payloads' shared host copy, pinned read-only.
		{Options{Resident: true, Share: true, ShareDir: filepath.Join(t.TempDir(), "share"), Check: true}, 3},
	} {
		o.DeviceTimes = true
		rep, err := loadRuns(context.Background(), eng, c, src, o)
		if err != nil || !rep.Checked {
			t.Fatalf("%+v: %v", o, err)
		}
		t.Logf("%s: %d tensors, runs %+v", rep.Mode, rep.Tensors, rep.Runs)
		for i, r := range rep.Runs {
			// Device times come from CUDA events: the copies take some
			// time, a decode too on the payload path, and the busy times
			// fit in the run.
			if r.Device.Copy <= 0 || (!o.Raw && r.Device.Decode <= 0) || r.Device.DecodeAlone > r.Device.Decode ||
				r.Device.Copy > r.Wall || r.Device.Decode > r.Wall {
				t.Errorf("%s run %d: device times %+v in %v", rep.Mode, i+1, r.Device, r.Wall)
			}
		}
	}
}
