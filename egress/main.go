package egress

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// Files a proxy process inherits, in order from fd 3: the DNS UDP socket, the DNS TCP
// listener, the TCP proxy listener, and the read end of a pipe on which the process that
// started it writes "serve" once it has recorded it (end of file, or anything else, and the
// proxy exits: a creator that died halfway leaves no proxy behind).
const (
	FDDNSUDP = 3 + iota
	FDDNSTCP
	FDProxy
	FDGo
)

// ServeWord is what the starter writes on FDGo.
const ServeWord = "serve"

// ProcessConfig is the file a proxy process is started with.
type ProcessConfig struct {
	Config
	Policy string `json:"policy"` // a File, read at start and again on SIGHUP
}

// ReadPolicy reads and parses a policy File, and returns its generation.
func ReadPolicy(path string) (*Policy, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	p, err := f.Policy()
	return p, f.Generation, err
}

// Reload makes the policy file at path p's policy, and answers in its Applied file: the
// file's generation once p enforces it, or AppliedError and why p keeps the policy it had
// (the host waits on that file, and learns why there at once).
func Reload(p *Proxy, path string) error {
	pol, gen, err := ReadPolicy(path)
	if err != nil {
		err = fmt.Errorf("keeping the policy in force: %w", err)
		if werr := os.WriteFile(Applied(path), []byte(AppliedError+err.Error()), 0o600); werr != nil {
			return errors.Join(err, werr)
		}
		return err
	}
	p.SetPolicy(pol) // cuts what it refuses before returning
	return os.WriteFile(Applied(path), []byte(strconv.FormatInt(gen, 10)), 0o600)
}

// Main is the proxy process (`tupper egress-proxy --config PATH`): it serves on the
// inherited sockets until SIGTERM, rereading the policy on SIGHUP.
func Main(ctx context.Context, configPath string) error {
	// First: a SIGHUP before this would end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	b, err := os.ReadFile(configPath)
	if err != nil {
		return err
	}
	var cfg ProcessConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s: %w", configPath, err)
	}
	pol, _, err := ReadPolicy(cfg.Policy)
	if err != nil {
		return err
	}
	goPipe := os.NewFile(FDGo, "go")
	word, _ := bufio.NewReader(goPipe).ReadString('\n')
	goPipe.Close()
	if strings.TrimSpace(word) != ServeWord {
		return errors.New("egress proxy: not told to serve")
	}
	pc, err := net.FilePacketConn(os.NewFile(FDDNSUDP, "dns-udp"))
	if err != nil {
		return fmt.Errorf("dns udp socket: %w", err)
	}
	dnsLn, err := net.FileListener(os.NewFile(FDDNSTCP, "dns-tcp"))
	if err != nil {
		return fmt.Errorf("dns tcp socket: %w", err)
	}
	ln, err := net.FileListener(os.NewFile(FDProxy, "proxy"))
	if err != nil {
		return fmt.Errorf("proxy socket: %w", err)
	}
	p, err := NewProxy(cfg.Config, pol)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		for range hup {
			if err := Reload(p, cfg.Policy); err != nil {
				fmt.Fprintln(os.Stderr, "egress proxy:", err)
			}
		}
	}()
	errc := make(chan error, 2)
	go func() { errc <- p.ServeDNS(ctx, pc, dnsLn) }()
	go func() { errc <- p.ServeTCP(ln) }()
	select {
	case <-ctx.Done():
		ln.Close()
		return nil
	case err := <-errc:
		return err
	}
}
