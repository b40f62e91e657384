package deps
import (
 _ "connectrpc.com/connect"
 _ "google.golang.org/protobuf/proto"
 _ "mvdan.cc/sh/v3/interp"
 _ "github.com/spf13/cobra"
 _ "github.com/opencontainers/runtime-spec/specs-go"
 _ "golang.org/x/sys/unix"
 _ "github.com/modelcontextprotocol/go-sdk/mcp"
 _ "modernc.org/sqlite"
 _ "golang.org/x/net/http2"
 _ "github.com/bmatcuk/doublestar/v4"
)
