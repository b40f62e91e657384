// Package zerocopy gives unix-socket connections an io.ReaderFrom, so that
// net/http's client and server, which only take their zero-copy path when
// the connection implements io.ReaderFrom (as *net.TCPConn does and
// *net.UnixConn does not), send files with sendfile(2) and in-memory
// bodies with a single write instead of 32 KiB chunks copied through a
// buffer.
package zerocopy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Conn is a net.Conn with a ReadFrom that avoids copies. Methods of the
// underlying connection other than Read, Write and those of net.Conn (such
// as CloseWrite) stay reachable through Unwrap or the interfaces Conn
// implements itself.
type Conn struct {
	net.Conn
	raw syscall.RawConn // nil when the connection has no descriptor
}

// Wrap returns c with ReadFrom, or c itself when it is not a stream socket
// with a file descriptor.
func Wrap(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &Conn{Conn: c, raw: raw}
}

// Unwrap returns the wrapped connection.
func (c *Conn) Unwrap() net.Conn { return c.Conn }

// CloseWrite half-closes the connection when the wrapped one can.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("close write not supported")
}

var bufs = sync.Pool{New: func() any { return new([256 << 10]byte) }}

// ReadFrom copies r to the connection: a regular file (possibly inside an
// *io.LimitedReader or *io.SectionReader) with sendfile, a reader that can
// write itself out whole (*bytes.Reader, *strings.Reader) with one write,
// anything else through a 256 KiB buffer.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	limit := int64(-1)
	src := r
	if lr, ok := r.(*io.LimitedReader); ok {
		limit, src = lr.N, lr.R
		defer func() { lr.N = limit }()
		n, err := c.readFrom(src, &limit)
		return n, err
	}
	return c.readFrom(src, &limit)
}

// readFrom copies at most *limit bytes (all when negative), updating it.
func (c *Conn) readFrom(src io.Reader, limit *int64) (int64, error) {
	off := int64(-1) // -1: the file's own offset
	var f *os.File
	switch s := src.(type) {
	case *os.File:
		f = s
	case *io.SectionReader:
		if of, base, n := s.Outer(); n >= 0 {
			if file, ok := of.(*os.File); ok {
				pos, err := s.Seek(0, io.SeekCurrent)
				if err == nil {
					f, off = file, base+pos
					if rem := n - pos; *limit < 0 || rem < *limit {
						*limit = max(rem, 0)
					}
				}
			}
		}
	}
	if f != nil && c.raw != nil {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			n, handled, err := c.sendfile(f, off, limit)
			if handled {
				if off >= 0 && n > 0 {
					// Advance the SectionReader like a Read would.
					_, _ = src.(*io.SectionReader).Seek(n, io.SeekCurrent)
				}
				return n, err
			}
		}
	}
	if wt, ok := src.(interface {
		io.WriterTo
		Len() int
	}); ok && (*limit < 0 || int64(wt.Len()) <= *limit) {
		n, err := wt.WriteTo(c.Conn)
		if *limit >= 0 {
			*limit -= n
		}
		return n, err
	}
	bp := bufs.Get().(*[256 << 10]byte)
	defer bufs.Put(bp)
	var rd io.Reader = src
	lr := &io.LimitedReader{R: src, N: *limit}
	if *limit >= 0 {
		rd = lr
	}
	n, err := io.CopyBuffer(struct{ io.Writer }{c.Conn}, struct{ io.Reader }{rd}, bp[:])
	if *limit >= 0 {
		*limit = lr.N
	}
	return n, err
}

// sendfile sends from f (at off, or its own offset when off < 0) until EOF
// or *limit bytes. handled is false when nothing was sent and the caller
// should copy instead.
func (c *Conn) sendfile(f *os.File, off int64, limit *int64) (written int64, handled bool, err error) {
	frc, err := f.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var ferr error
	cerr := frc.Control(func(ffd uintptr) {
		for *limit != 0 {
			chunk := int64(4 << 20)
			if *limit > 0 && *limit < chunk {
				chunk = *limit
			}
			var n int
			var serr error
			werr := c.raw.Write(func(sfd uintptr) bool {
				if off >= 0 {
					o := off
					n, serr = unix.Sendfile(int(sfd), int(ffd), &o, int(chunk))
				} else {
					n, serr = unix.Sendfile(int(sfd), int(ffd), nil, int(chunk))
				}
				return serr != unix.EAGAIN
			})
			if werr != nil {
				ferr = werr
				return
			}
			if serr == unix.EINTR {
				continue
			}
			if serr != nil {
				if written == 0 && (serr == unix.EINVAL || serr == unix.ENOSYS || serr == unix.EOPNOTSUPP) {
					return // not handled: copy instead
				}
				ferr = os.NewSyscallError("sendfile", serr)
				handled = true
				return
			}
			handled = true
			if n == 0 {
				return // EOF
			}
			written += int64(n)
			if off >= 0 {
				off += int64(n)
			}
			if *limit > 0 {
				*limit -= int64(n)
			}
		}
		handled = true
	})
	if cerr != nil && !handled {
		return 0, false, nil
	}
	return written, handled, ferr
}

// Listener wraps every accepted connection with Wrap.
type Listener struct{ net.Listener }

// Accept waits for the next connection.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}
