// Package sockstest is a minimal SOCKS5 server for tests (RFC 1928 CONNECT, RFC 1929
// username and password): it records each login and CONNECT, names as names (ATYP=domain)
// and addresses as addresses, then relays to where the test says the target is.
package sockstest

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Connect is one CONNECT the server read.
type Connect struct {
	ATYP   byte   // 1 IPv4, 3 domain name, 4 IPv6
	Target string // host:port as asked
}

// Server is a SOCKS5 server on a listener of the test's.
type Server struct {
	// User and Pass, when User is set, are the only credentials accepted; else none are
	// asked for.
	User, Pass string
	// Route returns where a CONNECT's target (host:port) is, or "" to answer host
	// unreachable; nil means the target itself.
	Route func(target string) string

	ln       net.Listener
	mu       sync.Mutex
	accepted int
	connects []Connect
	logins   []string
}

// Serve serves s on ln until ln is closed; call once.
func (s *Server) Serve(ln net.Listener) {
	s.ln = ln
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.accepted++
		s.mu.Unlock()
		go s.serve(c)
	}
}

// Seen returns how many connections the server took, the CONNECTs it read and the logins
// ("user:pass") it was sent.
func (s *Server) Seen() (accepted int, connects []Connect, logins []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted, slices.Clone(s.connects), slices.Clone(s.logins)
}

func (s *Server) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	head := make([]byte, 2)
	if _, err := io.ReadFull(br, head); err != nil || head[0] != 5 {
		return
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	want := byte(0)
	if s.User != "" {
		want = 2
	}
	if !slices.Contains(methods, want) {
		c.Write([]byte{5, 0xff})
		return
	}
	c.Write([]byte{5, want})
	if want == 2 {
		ver, _ := br.ReadByte()
		ul, _ := br.ReadByte()
		u := make([]byte, ul)
		io.ReadFull(br, u)
		pl, _ := br.ReadByte()
		p := make([]byte, pl)
		if _, err := io.ReadFull(br, p); err != nil || ver != 1 {
			return
		}
		s.mu.Lock()
		s.logins = append(s.logins, string(u)+":"+string(p))
		s.mu.Unlock()
		if string(u) != s.User || string(p) != s.Pass {
			c.Write([]byte{1, 1})
			return
		}
		c.Write([]byte{1, 0})
	}
	req := make([]byte, 4)
	if _, err := io.ReadFull(br, req); err != nil || req[0] != 5 || req[1] != 1 {
		return
	}
	var host string
	switch req[3] {
	case 1, 4:
		b := make([]byte, 4)
		if req[3] == 4 {
			b = make([]byte, 16)
		}
		io.ReadFull(br, b)
		a, _ := netip.AddrFromSlice(b)
		host = a.String()
	case 3:
		l, _ := br.ReadByte()
		b := make([]byte, l)
		io.ReadFull(br, b)
		host = string(b)
	default:
		return
	}
	pb := make([]byte, 2)
	if _, err := io.ReadFull(br, pb); err != nil {
		return
	}
	target := net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(pb))))
	s.mu.Lock()
	s.connects = append(s.connects, Connect{req[3], target})
	s.mu.Unlock()
	reply := []byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	to := target
	if s.Route != nil {
		to = s.Route(target)
	}
	var up net.Conn
	if to != "" {
		up, _ = net.DialTimeout("tcp4", to, 5*time.Second)
	}
	if up == nil {
		reply[1] = 4 // host unreachable
		c.Write(reply)
		return
	}
	defer up.Close()
	c.Write(reply)
	c.SetDeadline(time.Time{})
	go func() {
		io.Copy(up, br)
		if tc, ok := up.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	io.Copy(c, up)
}
