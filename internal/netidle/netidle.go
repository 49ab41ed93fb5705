// Package netidle ends connections that go silent: a dialer whose
// connections fail a read that waits longer than a limit for its first
// byte, so that a server that accepts and never answers, or stops
// mid-body, is an error (a net.Error that times out) where an HTTP client
// without its own timeouts would wait forever.
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
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		err = &Error{Addr: c.Conn.RemoteAddr().String(), Idle: c.idle}
	}
	return n, err
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
