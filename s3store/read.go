package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// resumeTries is how many times in a row Open asks again for the rest of
// a part whose body broke off before it brought resumeProgress bytes, each
// time from the bytes that arrived (one that brought as many starts the
// count again).
const (
	resumeTries    = 3
	resumeProgress = 64 << 10
)

// Open streams object name's bytes from off to size (the object's size,
// known to the caller) as ranged GETs of the part size, up to Ahead of
// them in flight, returned in order. A part whose body breaks off is
// asked for again from the byte it stopped at. Close stops the requests
// in flight; the reader must be closed.
func (s *Store) Open(ctx context.Context, name string, off, size int64) io.ReadCloser {
	ctx, cancel := context.WithCancel(ctx)
	return &reader{s: s, ctx: ctx, cancel: cancel, name: name, next: off, size: size}
}

// reader is Open's stream: a queue of parts, the first being read.
type reader struct {
	s      *Store
	ctx    context.Context
	cancel context.CancelFunc
	name   string
	next   int64 // the first byte no part has asked for
	size   int64
	queue  []*part
	cur    []byte // what is left of held's bytes
	held   *part  // the part being read, its buffer returned when done
	err    error
}

// release returns the buffer of the part read to the end.
func (r *reader) release() {
	if r.held != nil {
		r.held.free(r.s)
		r.held = nil
	}
}

// part is one ranged GET, read whole into buf.
type part struct {
	done chan struct{}
	buf  []byte
	pool *[]byte // buf's buffer from the store's pool, if it is one
	err  error
}

// free returns the part's buffer to the pool.
func (p *part) free(s *Store) {
	if p.pool != nil {
		s.buffers.Put(p.pool)
		p.pool, p.buf = nil, nil
	}
}

func (r *reader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.fill()
		if len(r.queue) == 0 {
			r.err = io.EOF
			return 0, io.EOF
		}
		h := r.queue[0]
		<-h.done
		r.queue = r.queue[1:]
		r.release()
		if h.err != nil {
			h.free(r.s)
			r.err = h.err
			return 0, h.err
		}
		r.cur, r.held = h.buf, h
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	if len(r.cur) == 0 {
		r.release()
	}
	r.fill()
	return n, nil
}

// fill starts parts until Ahead are in flight or none is left to ask for.
func (r *reader) fill() {
	for len(r.queue) < r.s.ahead && r.next < r.size {
		n := min(r.s.partSize, r.size-r.next)
		p := &part{done: make(chan struct{})}
		go r.get(p, r.next, n)
		r.queue = append(r.queue, p)
		r.next += n
	}
}

// get reads n bytes from off into p, resuming a body that breaks off.
func (r *reader) get(p *part, off, n int64) {
	defer close(p.done)
	if n == r.s.partSize {
		p.pool = r.s.buffers.Get().(*[]byte)
		p.buf = *p.pool
	} else {
		p.buf = make([]byte, n)
	}
	var got int64
	for fails := 0; ; {
		body, err := r.s.Range(r.ctx, r.name, off+got, n-got)
		if err != nil {
			p.err = err
			return
		}
		m, err := io.ReadFull(body, p.buf[got:])
		body.Close()
		got += int64(m)
		if fails++; m >= resumeProgress {
			fails = 0
		}
		switch {
		case err == nil:
			return
		case r.ctx.Err() != nil:
			p.err = r.ctx.Err()
			return
		case fails > resumeTries:
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				err = fmt.Errorf("%d of %d bytes at %d: %w", got, n, off, io.ErrUnexpectedEOF)
			}
			p.err = fmt.Errorf("%s: %w", r.s.where(r.name), err)
			return
		}
	}
}

// Close stops the parts in flight and waits for them.
func (r *reader) Close() error {
	r.cancel()
	for _, p := range r.queue {
		<-p.done
		p.free(r.s)
	}
	r.release()
	r.queue, r.cur = nil, nil
	if r.err == nil {
		r.err = errors.New("read after close")
	}
	return nil
}

var _ io.ReadCloser = (*reader)(nil)

// waitAll is a sync.WaitGroup's Go that keeps the first error.
type waitAll struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	first error
}

func (w *waitAll) Go(f func() error) {
	w.wg.Go(func() {
		if err := f(); err != nil {
			w.mu.Lock()
			if w.first == nil {
				w.first = err
			}
			w.mu.Unlock()
		}
	})
}

func (w *waitAll) Wait() error {
	w.wg.Wait()
	return w.first
}
