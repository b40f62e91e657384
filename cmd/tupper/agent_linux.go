package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/agent"
	"github.com/tupper-dev/tupper/agent/spec"
)

// newAgentCmd is "tupper agent": the in-sandbox agent, normally PID 1 of a
// sandbox, serving envd-compatible Connect RPC, /files and Tupper's
// extensions on one listener.
func newAgentCmd() *cobra.Command {
	var (
		listen     string
		listenFD   int
		configPath string
		protocol   bool
		relay      string
		cgroupFD   int
	)
	cmd := &cobra.Command{
		Use:   "agent [--listen unix:PATH | --listen-fd N] [--config PATH]",
		Short: "Run the in-sandbox agent (PID 1 of a sandbox)",
		Long: "tupper agent runs inside a sandbox, usually as its PID 1. It runs commands, serves file\n" +
			"operations and watches, reaps zombies and enforces the sandbox's deadlines. It speaks\n" +
			"E2B envd's Connect protocol plus /files, /health and Tupper's /tupper/ extensions.\n" +
			"The config file is JSON; see the agent package documentation for its fields.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if protocol {
				// A host checks a binary with this before running it as an agent.
				fmt.Fprintln(cmd.OutOrStdout(), spec.ProbeReply, spec.Version)
				return nil
			}
			if relay != "" {
				return relayStdio(relay)
			}
			var cfg agent.Config
			if configPath == "-" {
				// The config on standard input, up to its end (the Docker provider's way:
				// no file in the container holds it).
				b, err := io.ReadAll(io.LimitReader(os.Stdin, maxStdinConfig+1))
				if err != nil {
					return fmt.Errorf("agent config: standard input: %w", err)
				}
				if len(b) > maxStdinConfig {
					return fmt.Errorf("agent config: standard input holds more than %d bytes", maxStdinConfig)
				}
				c, err := agent.ParseConfig(b)
				if err != nil {
					return err
				}
				cfg = c
			} else if configPath != "" {
				c, err := agent.LoadConfig(configPath)
				if err != nil {
					return err
				}
				cfg = c
			}
			if cgroupFD >= 0 {
				if cgroupFD < 3 {
					return fmt.Errorf("--command-cgroup-fd %d: must be an inherited descriptor (3 or more)", cgroupFD)
				}
				syscall.CloseOnExec(cgroupFD) // the agent closes it too; no command inherits it
				cfg.CommandCgroup = os.NewFile(uintptr(cgroupFD), "command-cgroup")
			}
			ln, err := agentListener(listen, listenFD)
			if err != nil {
				return err
			}
			err = agent.Serve(cmd.Context(), ln, cfg)
			if errors.Is(err, agent.ErrDeadline) || errors.Is(err, agent.ErrIdle) {
				fmt.Fprintln(cmd.ErrOrStderr(), "tupper agent:", err)
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "address to serve on: unix:PATH or tcp:HOST:PORT")
	cmd.Flags().IntVar(&listenFD, "listen-fd", -1, "serve on this inherited listening socket instead of --listen")
	cmd.Flags().StringVar(&configPath, "config", "", "JSON config file (- for standard input)")
	cmd.Flags().IntVar(&cgroupFD, "command-cgroup-fd", -1, "an inherited, writable cgroup v1 tasks file: commands start in that pids cgroup, below the agent's")
	cmd.Flags().StringVar(&relay, "relay", "", "relay standard input and output to and from the agent's unix socket at this path, then exit")
	cmd.Flags().MarkHidden("relay")
	cmd.Flags().BoolVar(&protocol, strings.TrimPrefix(spec.ProbeFlag, "--"), false, "print the agent protocol version and exit")
	cmd.Flags().MarkHidden(strings.TrimPrefix(spec.ProbeFlag, "--"))
	return cmd
}

// relayStdio connects standard input and output to the agent's unix socket at path until
// both directions end: how the Docker provider reaches the agent of a container with no
// network, one engine exec of this per connection.
func relayStdio(path string) error {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer conn.Close()
	go func() {
		io.Copy(conn, os.Stdin)
		conn.(*net.UnixConn).CloseWrite()
	}()
	_, err = io.Copy(os.Stdout, conn)
	return err
}

// maxStdinConfig bounds a config read from standard input (--config -).
const maxStdinConfig = 16 << 20

func agentListener(listen string, fd int) (net.Listener, error) {
	switch {
	case fd >= 0 && listen != "":
		return nil, errors.New("give either --listen or --listen-fd, not both")
	case fd >= 0:
		f := os.NewFile(uintptr(fd), "listener")
		if f == nil {
			return nil, fmt.Errorf("--listen-fd %d: not a file descriptor", fd)
		}
		defer f.Close()
		ln, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("--listen-fd %d: %w", fd, err)
		}
		return ln, nil
	case strings.HasPrefix(listen, "unix:"):
		path := strings.TrimPrefix(listen, "unix:")
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(path) // a stale socket from a previous run
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, err
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(true)
		return ln, nil
	case strings.HasPrefix(listen, "tcp:"):
		return net.Listen("tcp", strings.TrimPrefix(listen, "tcp:"))
	}
	return nil, errors.New("need --listen unix:PATH (or tcp:HOST:PORT) or --listen-fd N")
}
