//go:build unix

package main

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// notifyResize sends on c when the controlling terminal changes size (SIGWINCH).
func notifyResize(c chan<- os.Signal) { signal.Notify(c, unix.SIGWINCH) }
