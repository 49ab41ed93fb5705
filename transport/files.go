package transport

// Files the transports read by path: source shards, and whatever file a
// raw binding's spec names (for a source that is absent, its copy in the
// cache), kept open while a transport lives. The payload transport reads
// the cache's objects through shardcache.ObjectFiles, which checks packs
// against the index, small raw copies among them.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"

	"github.com/splitzip/splitzip/shardcache"
)

// fileCache keeps files open that many reads share (source shards). A
// path of a remote cache's file (cache set, shardcache.OpenRemote) is read
// through the cache.
type fileCache struct {
	mu    sync.Mutex
	files map[string]*os.File
	cache *shardcache.Cache
}

func (c *fileCache) get(path string) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.files[path]; ok {
		return f, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && c.cache.Holds(path) {
		// A raw copy the index names, gone: the cache is damaged (or
		// went as a whole).
		return nil, fmt.Errorf("%s: %w", path, shardcache.MissingObject(path))
	}
	if err != nil {
		return nil, err
	}
	if c.files == nil {
		c.files = map[string]*os.File{}
	}
	c.files[path] = f
	return f, nil
}

func (c *fileCache) readAt(path string, dst []byte, off uint64) error {
	if ok, err := c.cache.ReadRemote(path, dst, int64(off)); ok {
		return err
	}
	f, err := c.get(path)
	if err != nil {
		return err
	}
	n, err := f.ReadAt(dst, int64(off))
	if err == io.EOF && n < len(dst) {
		short := ErrShortRead
		if c.cache.Holds(path) {
			short = shardcache.ErrObjectCorrupt // a raw copy of the cache's, truncated
		}
		return fmt.Errorf("%s: %w (%d of %d bytes at offset %d)", path, short, n, len(dst), off)
	}
	return err
}

func (c *fileCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, f := range c.files {
		f.Close()
		delete(c.files, p)
	}
	return nil
}
