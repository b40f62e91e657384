//go:build tupper_memory

package main

// --provider memory: no isolation, for tests and trying things out. The tupper that tests
// run is built with this file (internal/testenv.MemoryTag), so that they run without root;
// the product binary is not.
import _ "github.com/tupper-dev/tupper/providers/memory"
