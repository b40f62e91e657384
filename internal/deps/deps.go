package deps

import (
	_ "connectrpc.com/connect"
	_ "github.com/bmatcuk/doublestar/v4"
	_ "github.com/modelcontextprotocol/go-sdk/mcp"
	_ "github.com/opencontainers/runtime-spec/specs-go"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/net/http2"
	_ "golang.org/x/sys/unix"
	_ "google.golang.org/protobuf/proto"
	_ "modernc.org/sqlite"
	_ "mvdan.cc/sh/v3/interp"
)
