package main

import "os"

// notifyResize does nothing: a Windows console sends no signal when it changes size, so a
// terminal keeps the size it started with.
func notifyResize(chan<- os.Signal) {}
