package zerocopy

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFrom(t *testing.T) {
	data := make([]byte, 3<<20+123)
	for i := range data {
		data[i] = byte(i * 7)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	open := func() *os.File {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	cases := []struct {
		name string
		src  func() io.Reader
		want []byte
	}{
		{"file", func() io.Reader { return open() }, data},
		{"file after a read", func() io.Reader { f := open(); io.CopyN(io.Discard, f, 1000); return f }, data[1000:]},
		{"limited file", func() io.Reader { return io.LimitReader(open(), 1<<20+5) }, data[:1<<20+5]},
		{"section", func() io.Reader { return io.NewSectionReader(open(), 77, 2<<20) }, data[77 : 77+2<<20]},
		{"section past the end", func() io.Reader { return io.NewSectionReader(open(), int64(len(data))-10, 100) }, data[len(data)-10:]},
		{"section after a read", func() io.Reader {
			s := io.NewSectionReader(open(), 5, 1<<20)
			io.CopyN(io.Discard, s, 512)
			return s
		}, data[5+512 : 5+1<<20]},
		{"bytes", func() io.Reader { return bytes.NewReader(data) }, data},
		{"limited bytes", func() io.Reader { return io.LimitReader(bytes.NewReader(data), 999) }, data[:999]},
		{"strings", func() io.Reader { return strings.NewReader("hello") }, []byte("hello")},
		{"plain reader", func() io.Reader { return struct{ io.Reader }{bytes.NewReader(data)} }, data},
		{"pipe (not regular)", func() io.Reader {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			go func() { w.Write(data[:70000]); w.Close() }()
			t.Cleanup(func() { r.Close() })
			return r
		}, data[:70000]},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b, err := socketPair()
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			got := make(chan []byte)
			go func() { d, _ := io.ReadAll(b); got <- d }()
			c := Wrap(a)
			src := tc.src()
			n, err := c.(io.ReaderFrom).ReadFrom(src)
			a.Close()
			d := <-got
			if err != nil || n != int64(len(tc.want)) || !bytes.Equal(d, tc.want) {
				t.Fatalf("ReadFrom: n=%d err=%v, received %d bytes (equal %v), want %d", n, err, len(d), bytes.Equal(d, tc.want), len(tc.want))
			}
			// Readers are left where a Read loop would leave them.
			if lr, ok := src.(*io.LimitedReader); ok && lr.N != 0 {
				t.Errorf("LimitedReader.N = %d after the copy", lr.N)
			}
			if rest, _ := io.ReadAll(src); len(rest) != 0 {
				t.Errorf("%d bytes left in the source", len(rest))
			}
		})
	}
}

func socketPair() (net.Conn, net.Conn, error) {
	ln, err := net.Listen("unix", filepath.Join(os.TempDir(), "zc-"+randName()))
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res)
	go func() { c, err := ln.Accept(); ch <- res{c, err} }()
	a, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	r := <-ch
	return a, r.c, r.err
}

func randName() string {
	f, _ := os.CreateTemp("", "zc")
	f.Close()
	os.Remove(f.Name())
	return filepath.Base(f.Name())
}
