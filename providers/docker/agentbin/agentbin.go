// Package agentbin holds the Linux tupper binaries that a tupper built for macOS or Windows
// runs as the agent of its Docker containers, embedded at build time (scripts/build.sh puts
// them in embedded/ first). A build without them, such as a plain `go build`, has none, and
// Lookup says so. Nothing is ever downloaded.
package agentbin

import (
	"embed"
	"io/fs"
)

//go:embed embedded
var embedded embed.FS

// FS holds tupper-linux-GOARCH.gz files at its root: the gzipped static Linux tupper for
// each architecture this binary can serve.
var FS fs.FS = mustSub(embedded, "embedded")

// Name is the file name of the gzipped agent for goarch in FS.
func Name(goarch string) string { return "tupper-linux-" + goarch + ".gz" }

func mustSub(f fs.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return s
}
