package main

// The providers the tupper binary can use. Each registers itself on import.
import (
	_ "github.com/tupper-dev/tupper/providers/e2b"
	_ "github.com/tupper-dev/tupper/providers/local"
	_ "github.com/tupper-dev/tupper/providers/memory"
)
