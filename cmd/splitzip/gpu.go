package main

import (
	"fmt"

	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/failure"
)

// openGPU opens device ordinal, with a clear error where there is none.
func openGPU(ordinal int) (*cuda.Context, error) {
	l, err := cuda.Open()
	if err != nil {
		return nil, failure.Mark(failure.Device, fmt.Errorf("this command needs an NVIDIA GPU and its driver: %w", err))
	}
	n, err := l.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, failure.Mark(failure.Device, fmt.Errorf("GPU %d does not exist (%d found)", ordinal, n))
	}
	return l.NewContext(ordinal)
}

// gpuDecoder opens a GPU decoder for verify --gpu.
func gpuDecoder(ordinal int) (*gpu.Decoder, func(), error) {
	ctx, err := openGPU(ordinal)
	if err != nil {
		return nil, nil, err
	}
	d, err := gpu.NewDecoder(ctx)
	if err != nil {
		ctx.Close()
		return nil, nil, err
	}
	return d, func() { d.Close(); ctx.Close() }, nil
}
