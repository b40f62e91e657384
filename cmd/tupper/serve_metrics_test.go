package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
)

// TestListenMetrics: the default metrics address in use (a second server on the machine) is
// a warning and no listener; an address the operator chose must work.
func TestListenMetrics(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var out bytes.Buffer
	ln, err := listenMetrics(busy.Addr().String(), false, &out)
	if err != nil || ln != nil || !strings.Contains(out.String(), "is in use, so no metrics listener") {
		t.Errorf("default address in use: %v %v %q", ln, err, out.String())
	}
	if ln, err := listenMetrics(busy.Addr().String(), true, &out); err == nil || ln != nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Errorf("chosen address in use: %v %v", ln, err)
	}
	ln, err = listenMetrics("127.0.0.1:0", true, &out)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}
