// Package netidle ends connections that go silent: a dialer whose
// connections fail a read that waits longer than a limit for a byte, or a
// write that waits as long to send one, so that a server that accepts
// and never answers, stops mid-body or stops taking an upload is an error
// (a net.Error that times out) where an HTTP client without its own
// timeouts would wait forever. Writing counts as activity for reads: an
// HTTP client reads for the answer from the moment it sends, and a server
// answers an upload only once it has it all.
package netidle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Timeout is how long a read waits for bytes by default: far beyond a
// loaded server's pauses, short of a user giving up.
const Timeout = 60 * time.Second

// DialFunc dials as net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Dial returns dial whose connections fail a read that waits more than
// idle for a byte (idle <= 0: Timeout).
func Dial(dial DialFunc, idle time.Duration) DialFunc {
	if idle <= 0 {
		idle = Timeout
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &conn{Conn: c, idle: idle}, nil
	}
}

// conn is a connection whose reads time out after idle without a byte.
type conn struct {
	net.Conn
	idle time.Duration
}

func (c *conn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	return n, c.timedOut(err)
}

// Write sends p, failing once the peer takes no byte for idle, and moves
// the deadline of a read waiting meanwhile (the answer to what is being
// sent) past idle from now.
func (c *conn) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		// A piece a deadline: a slow link that takes each piece in time
		// is no silence, however long all of p takes.
		d := time.Now().Add(c.idle)
		if err := c.Conn.SetWriteDeadline(d); err != nil {
			return n, err
		}
		if err := c.Conn.SetReadDeadline(d); err != nil {
			return n, err
		}
		k, err := c.Conn.Write(p[n:min(len(p), n+writePiece)])
		n += k
		if err != nil {
			return n, c.timedOut(err)
		}
	}
	return n, nil
}

// writePiece is the most bytes Write sends under one deadline.
const writePiece = 64 << 10

// timedOut is err, an Error where a deadline ended it.
func (c *conn) timedOut(err error) error {
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return &Error{Addr: c.Conn.RemoteAddr().String(), Idle: c.idle}
	}
	return err
}

// Error is a read that waited Idle for a byte from Addr.
type Error struct {
	Addr string
	Idle time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s sent nothing for %v: the connection was given up", e.Addr, e.Idle)
}

// Timeout reports true: Error is a net.Error that timed out.
func (e *Error) Timeout() bool { return true }

// Temporary reports true, as net.Error's timeouts do.
func (e *Error) Temporary() bool { return true }

var _ net.Error = (*Error)(nil)
