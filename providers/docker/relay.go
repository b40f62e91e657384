package docker

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"

	"github.com/moby/moby/client"

	agentclient "github.com/tupper-dev/tupper/agent/client"
)

// relayDial reaches the agent of container cid, which has no network: each connection is an
// engine exec of `tupper agent --relay` that joins the exec's standard input and output to
// the agent's unix socket in the container. The engine's exec stream works wherever its API
// does (Docker Desktop's VM included), which a bind-mounted socket does not. HTTP keep-alive
// reuses the connections, so a new exec is paid for only when one more is open at a time.
func (p *Provider) relayDial(cid string) agentclient.DialFunc {
	return func(ctx context.Context) (net.Conn, error) {
		ex, err := p.cli.ExecCreate(ctx, cid, client.ExecCreateOptions{
			User: "0:0", AttachStdin: true, AttachStdout: true,
			Cmd: []string{agentBinPath, "agent", "--relay", agentSocket},
		})
		if err != nil {
			return nil, p.err(err, "reaching the agent")
		}
		att, err := p.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
		if err != nil {
			return nil, p.err(err, "reaching the agent")
		}
		return &relayConn{Conn: att.Conn, hr: att.HijackedResponse, r: att.Reader}, nil
	}
}

// relayConn is an exec's attached stream as a connection: writes go to the relay's standard
// input as they are; reads take the payload of its standard output out of the engine's
// frames (8 bytes: the stream, three zero bytes, the payload's length, big-endian), which
// the engine sends for an exec without a terminal. The relay writes nothing to its standard
// error but a reason it failed, returned as the read's error.
type relayConn struct {
	net.Conn
	hr   client.HijackedResponse
	r    io.Reader
	left uint32 // of the current standard output frame
}

func (c *relayConn) Read(b []byte) (int, error) {
	for c.left == 0 {
		var h [8]byte
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			if err == io.ErrUnexpectedEOF {
				err = fmt.Errorf("the agent relay: a truncated frame header")
			}
			return 0, err
		}
		n := binary.BigEndian.Uint32(h[4:])
		switch h[0] {
		case 1:
			c.left = n
		case 2:
			msg := make([]byte, min(n, 4<<10))
			io.ReadFull(c.r, msg)
			return 0, fmt.Errorf("the agent relay: %s", msg)
		default:
			return 0, fmt.Errorf("the agent relay: a frame of stream %d", h[0])
		}
	}
	if uint32(len(b)) > c.left {
		b = b[:c.left]
	}
	n, err := c.r.Read(b)
	c.left -= uint32(n)
	if err == io.EOF && c.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// CloseWrite ends the relay's standard input, which half-closes its connection to the agent.
func (c *relayConn) CloseWrite() error { return c.hr.CloseWrite() }
