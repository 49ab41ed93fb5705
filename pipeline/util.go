package pipeline

import "hash/crc32"

// crcTable is the CRC-32C table compress uses to notice a source that
// changes between its two passes.
var crcTable = crc32.MakeTable(crc32.Castagnoli)
