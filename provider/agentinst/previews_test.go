package agentinst_test

import (
	"bufio"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/agentinst"
)

// echoServer is a loopback server that writes back each line it reads, standing in for the
// agent's tunnel (the sandboxtest suite checks previews through real agents).
func echoServer(t *testing.T) string {
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
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestPreviews(t *testing.T) {
	target := echoServer(t)
	var dials atomic.Int32
	dial := func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", target)
	}
	var done atomic.Int32
	var ps agentinst.Previews
	addr, err := ps.Open("a", 3000, dial, func() { done.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if again, err := ps.Open("a", 3000, dial, func() { done.Add(1) }); err != nil || again != addr {
		t.Fatalf("second Open of one port = %q, %v; want %q (the same forwarder)", again, err, addr)
	}
	if n := done.Load(); n != 1 {
		t.Fatalf("done ran %d times after an Open that found the forwarder; want once, for that call", n)
	}
	other, err := ps.Open("b", 3000, dial, nil)
	if err != nil || other == addr {
		t.Fatalf("Open of another sandbox = %q, %v; want a forwarder of its own", other, err)
	}

	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	for _, msg := range []string{"one\n", "two\n"} {
		conn.Write([]byte(msg))
		if got, err := r.ReadString('\n'); err != nil || got != msg {
			t.Fatalf("through the forwarder: %q, %v; want %q", got, err, msg)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials for one connection", n)
	}

	// CloseSandbox ends a's forwarder, its open connection and runs done; b's lives on.
	ps.CloseSandbox("a")
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("a connection through a closed forwarder still reads")
	}
	if n := done.Load(); n != 2 {
		t.Fatalf("done ran %d times in all; want 2 (the duplicate Open, then the close)", n)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the closed forwarder's listener still accepts")
	}
	if c, err := net.DialTimeout("tcp", other, 5*time.Second); err != nil {
		t.Fatalf("b's forwarder after a's was closed: %v", err)
	} else {
		c.Close()
	}

	// Close ends the rest and refuses new forwarders.
	ps.Close()
	ps.Close()
	if c, err := net.DialTimeout("tcp", other, time.Second); err == nil {
		c.Close()
		t.Fatal("a forwarder still accepts after Close")
	}
	if _, err := ps.Open("c", 1, dial, nil); provider.CodeOf(err) != provider.CodeUnavailable {
		t.Fatalf("Open after Close = %v; want unavailable", err)
	}
}
