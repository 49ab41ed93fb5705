//go:build !linux

package nodeshare

func openShared(dir, id string, size uint64, fill func([]byte) error) (*mapping, Info, error) {
	return nil, Info{}, ErrUnsupported
}

func leave(m *mapping) error { return ErrUnsupported }
