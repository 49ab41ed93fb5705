package netidle

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestSilentServer: a read from a server that accepted and sends nothing
// fails after the idle time with a net.Error that timed out; one that
// sends within it reads its bytes.
func TestSilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 1)
				if _, err := c.Read(b); err != nil {
					return
				}
				if b[0] != 'x' {
					io.Copy(io.Discard, c) // silent: until the client gives up
					return
				}
				time.Sleep(50 * time.Millisecond)
				c.Write([]byte("hello"))
				io.Copy(io.Discard, c)
			}()
		}
	}()
	dial := Dial((&net.Dialer{}).DialContext, 300*time.Millisecond)

	c, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("s"))
	start := time.Now()
	_, err = c.Read(make([]byte, 8))
	var ne net.Error
	var ie *Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.As(err, &ie) || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("a silent server: %v after %v, want a timeout after 300ms", err, time.Since(start))
	}

	c2, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write([]byte("x"))
	b := make([]byte, 5)
	if _, err := io.ReadFull(c2, b); err != nil || string(b) != "hello" {
		t.Fatalf("a server that answers: %q, %v", b, err)
	}
}
