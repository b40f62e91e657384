// Command testagent is the in-sandbox agent for providers/local's tests when ./cmd/tupper
// does not build (it is the same agent package behind the same subcommand:
// "agent --listen unix:PATH --config PATH", and "agent --protocol").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tupper-dev/tupper/agent"
	"github.com/tupper-dev/tupper/agent/spec"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testagent agent ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "agent":
		fs := flag.NewFlagSet("agent", flag.ExitOnError)
		listen := fs.String("listen", "", "unix:PATH")
		config := fs.String("config", "", "JSON config file")
		protocol := fs.Bool(strings.TrimPrefix(spec.ProbeFlag, "--"), false, "print the agent protocol version")
		fs.Parse(os.Args[2:])
		if *protocol {
			fmt.Println(spec.ProbeReply, spec.Version)
			return
		}
		var cfg agent.Config
		if *config != "" {
			c, err := agent.LoadConfig(*config)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			cfg = c
		}
		path, ok := strings.CutPrefix(*listen, "unix:")
		if !ok {
			fmt.Fprintln(os.Stderr, "--listen unix:PATH is required")
			os.Exit(2)
		}
		os.Remove(path)
		ln, err := net.Listen("unix", path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		err = agent.Serve(ctx, ln, cfg)
		if err != nil && !errors.Is(err, agent.ErrDeadline) && !errors.Is(err, agent.ErrIdle) {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}
