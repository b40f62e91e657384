package main

// The providers the tupper binary can use, every one of them here and only here. Each
// registers itself on import.
import (
	_ "github.com/tupper-dev/tupper/providers/docker" // the platform default on macOS and Windows; --provider docker on Linux
	_ "github.com/tupper-dev/tupper/providers/e2b"
	_ "github.com/tupper-dev/tupper/providers/local"  // the platform default on Linux
	_ "github.com/tupper-dev/tupper/providers/memory" // --provider memory: no isolation, for trying it out
	_ "github.com/tupper-dev/tupper/providers/remote"
)
