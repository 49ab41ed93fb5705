package pipeline

import (
	"hash/crc32"

	"github.com/splitzip/splitzip/safetensors"
)

type safetensorsTensor = safetensors.Tensor

var crcTable = crc32.MakeTable(crc32.Castagnoli)
