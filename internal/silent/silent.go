// Package silent is for tests: a server on loopback that accepts TCP
// connections, takes what they send and never answers, as a registry or
// S3 server that hangs does (Start), and the same server with a handler of
// the test's own (Serve).
package silent

import (
	"io"
	"net"
	"testing"
)

// Start starts a silent server and returns its address (host:port); it
// stops when the test ends.
func Start(t testing.TB) string {
	t.Helper()
	return Serve(t, func(c net.Conn) { io.Copy(io.Discard, c) })
}

// Serve starts a server on loopback that hands each connection to handle
// (and closes it after) and returns its address; it stops when the test
// ends.
func Serve(t testing.TB, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
	return ln.Addr().String()
}
