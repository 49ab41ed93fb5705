package netidle

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/splitzip/splitzip/internal/silent"
)

// TestSilentServer: a read from a server that accepted and sends nothing
// fails after the idle time with a net.Error that timed out; one that
// sends within it reads its bytes.
func TestSilentServer(t *testing.T) {
	dial := Dial((&net.Dialer{}).DialContext, 300*time.Millisecond)
	c, err := dial(context.Background(), "tcp", silent.Start(t))
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

	addr := silent.Serve(t, func(c net.Conn) {
		time.Sleep(50 * time.Millisecond)
		c.Write([]byte("hello"))
		io.Copy(io.Discard, c)
	})
	c2, err := dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	b := make([]byte, 5)
	if _, err := io.ReadFull(c2, b); err != nil || string(b) != "hello" {
		t.Fatalf("a server that answers: %q, %v", b, err)
	}
}

// TestSlowUpload: a client that sends for several times the idle time,
// each piece within it, is not cut off while the server says nothing
// until it has it all; a server that stops taking bytes fails the write
// after the idle time.
func TestSlowUpload(t *testing.T) {
	const idle = 200 * time.Millisecond
	addr := silent.Serve(t, func(c net.Conn) {
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		if b[0] == 'w' { // a server that takes no more
			time.Sleep(10 * idle)
			return
		}
		// Read the upload (until 'e'), then answer.
		for b[0] != 'e' {
			if _, err := io.ReadFull(c, b); err != nil {
				return
			}
		}
		c.Write([]byte("done"))
	})
	dial := Dial((&net.Dialer{}).DialContext, idle)
	c, err := dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	answer := make(chan error, 1)
	go func() { // reading for the answer from the start, as an HTTP client does
		b := make([]byte, 4)
		_, err := io.ReadFull(c, b)
		answer <- err
	}()
	for range 9 { // 9 x idle/3: three times the idle time
		if _, err := c.Write([]byte("u")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(idle / 3)
	}
	c.Write([]byte("e"))
	if err := <-answer; err != nil {
		t.Fatalf("the answer after a slow upload: %v", err)
	}

	c2, err := dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, err = c2.Write(append([]byte("w"), make([]byte, 64<<20)...))
	var ie *Error
	if !errors.As(err, &ie) {
		t.Fatalf("a write the server does not take: %v, want a timeout", err)
	}
}
