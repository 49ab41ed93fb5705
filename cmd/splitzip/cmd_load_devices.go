package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/load"
	"github.com/splitzip/splitzip/shardcache"
)

// runLoadDevices is load --devices: the checkpoint placed on every
// device named (load.Devices).
func runLoadDevices(ctx context.Context, g *globals, o loadOptions, c *shardcache.Cache, src *shardcache.Source, pinnedLimit int64) error {
	names := strings.Split(o.Devices, ",")
	cpus := 0
	for i, d := range names {
		names[i] = strings.TrimSpace(d)
		if names[i] == "cpu" {
			cpus++
		}
	}
	switch {
	case o.Share:
		return usageError{errors.New("--devices loads once into each device: it takes no --share (a shared copy is kept resident)")}
	case o.Repeat > 1 || o.Compare > 0 || o.Resident || o.DeviceResident:
		return usageError{errors.New("--devices loads once: it takes neither --repeat, --compare, --resident nor --device-resident")}
	case o.Peer && cpus > 0 && cpus < len(names):
		return usageError{fmt.Errorf("--devices %s: host engines and GPUs cannot copy from each other (use --peer=false)", o.Devices)}
	}
	p := g.progress()
	p.Start("opening "+o.Devices, 0)
	var engs []engine.Engine
	defer func() {
		for _, e := range engs {
			e.Close()
		}
	}()
	for _, d := range names {
		e, err := o.engineFor("--devices", d)
		if err != nil {
			p.Finish()
			return err
		}
		engs = append(engs, e)
	}
	total := sourceBytes(src)
	if !o.Peer {
		total *= uint64(len(engs))
	}
	p.Start("loading onto "+o.Devices, total)
	lo := load.Options{Raw: o.Raw, Check: o.Check, Readers: o.Readers, SmallBytes: o.Small, Ahead: o.Ahead, DeviceTimes: o.Times,
		EntropyOnHost: o.EntropyOnHost, EntropyFromSource: o.FromSource, ReadThrough: o.ReadThrough, Progress: p.Add, PinnedLimit: pinnedLimit}
	rep, err := load.Devices(ctx, engs, c, src, lo, o.Peer)
	p.Finish()
	if err != nil {
		return err
	}
	for _, r := range rep.Parts {
		r.Settings.Streams = o.Streams
	}
	if g.JSON {
		return printJSON(g.stdout, "load_devices", rep)
	}
	how := "each device loaded everything over its own link"
	if rep.Peer {
		how = fmt.Sprintf("each device loaded a part and copied the others from their devices as each came in (%s of peer copies)", human(rep.PeerBytes))
	}
	fmt.Fprintf(g.stdout, "load %s onto %d devices (%s): %d tensors, %s each, placed in %v = %.1f GB/s of bytes placed; %s\n",
		rep.Mode, len(rep.Devices), o.Devices, rep.Tensors, human(rep.RawBytes), rep.Wall.Round(time.Microsecond), rep.GBps, how)
	for d, r := range rep.Parts {
		run := r.Runs[0]
		fmt.Fprintf(g.stdout, "  device %s (%s): %d tensors, %s in %v = %.1f GB/s; moved %s to it from the host, pinned %s\n",
			names[d], r.Device, r.Tensors, human(r.RawBytes), run.Wall.Round(time.Microsecond), run.GBps,
			human(r.MovedBytes), human(r.PinnedBytes))
	}
	if rep.Checked {
		fmt.Fprintln(g.stdout, "  every device's arena matches the content keys recorded at compress time, and the source bit for bit where it is there")
	}
	return nil
}
