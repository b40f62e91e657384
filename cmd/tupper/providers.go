package main

// The providers the tupper binary can use, every one of them here and in
// providers_memory.go only. Each registers itself on import.
import (
	"fmt"
	"strings"

	"github.com/tupper-dev/tupper/provider"
	_ "github.com/tupper-dev/tupper/providers/docker" // the platform default on macOS and Windows; --provider docker on Linux
	_ "github.com/tupper-dev/tupper/providers/e2b"
	_ "github.com/tupper-dev/tupper/providers/local" // the platform default on Linux
	_ "github.com/tupper-dev/tupper/providers/remote"
)

// memoryProvider is the in-process provider without isolation (providers/memory): a backend
// for tests and demos, which no command of tupper needs. The product binary leaves it out;
// tests build tupper with it (-tags tupper_memory, providers_memory.go).
const memoryProvider = "memory"

// checkProviderName explains, before the registry's more general error, why a tupper built
// without the memory provider refuses --provider memory.
func checkProviderName(name string) error {
	_, ok := provider.Lookup(name)
	return missingProvider(name, ok, provider.List())
}

// missingProvider is checkProviderName's error for name, registered or not, among the
// registered providers list.
func missingProvider(name string, registered bool, list []string) error {
	if name != memoryProvider || registered {
		return nil
	}
	return fmt.Errorf("--provider memory: the memory provider (no isolation, for tests) is not built into this tupper "+
		"(`go build -tags tupper_memory ./cmd/tupper` adds it); its providers: %s", strings.Join(list, ", "))
}
