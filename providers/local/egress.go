//go:build linux

package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/egress"
	"github.com/tupper-dev/tupper/internal/steps"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/hostnet"
)

// Network "allow" (an egress policy) is network "all" plus, per sandbox, a proxy on the
// host that decides what leaves: `tupper egress-proxy`, the agent binary in a hidden mode
// (package egress), started by Create like the holder (holder.go) — detached, in the
// sandbox's cgroups, its pid and start time in the record, killed by teardown — so that it
// outlives a short-lived CLI and needs no daemon.
//
// Its sockets are made by Create on the bridge's gateway address, ports chosen by the
// kernel, and handed to it as inherited files; the firewall (package internal/hostnet) sends it, for the
// sandbox's address only:
//
//	nat TUPPER-PRE-B   -s SANDBOX -p udp --dport 53 -j DNAT --to GATEWAY:DNS-UDP
//	                   -s SANDBOX -p tcp --dport 53 -j DNAT --to GATEWAY:DNS-TCP
//	                   -s SANDBOX -p tcp -j DNAT --to GATEWAY:PROXY
//	filter TUPPER-IN-B -s SANDBOX -d GATEWAY -p udp|tcp --dport <each port> -j RETURN
//	filter TUPPER-FWD-B -s SANDBOX -p tcp -j REJECT --reject-with tcp-reset;
//	                   -s SANDBOX -d DENIED -j REJECT; -s SANDBOX -d ALLOWED -p udp -j RETURN;
//	                   -s SANDBOX -j REJECT
//
// So every DNS query, to whichever server, over UDP or TCP, reaches the proxy's resolver;
// every TCP connection reaches its proxy, which reads where it was going (SO_ORIGINAL_DST);
// and nothing else leaves but UDP to allowed prefixes. All of it happens in the host's
// network namespace, out of reach of root in the sandbox. Create has the rules in place
// before the sandbox's interface exists, and the sockets bound before the rules: until the
// proxy serves, connections wait in its backlog; if it dies, nothing leaves. The policy is
// a file in the sandbox's directory (never mounted into it); SetNetwork rewrites it and
// signals the proxy (SIGHUP), which cuts connections the new policy refuses.

// Bound secrets (CreateSpec.BoundSecrets) ride on the same proxy. Create makes, per
// sandbox, a placeholder for each secret (egress.NewPlaceholder) and a CA (egress.NewCA,
// name-constrained to the secrets' hosts); the placeholders are the sandbox's environment
// under the secrets' names, the CA's certificate is appended to the system roots in the
// sandbox's /etc/ssl/certs/ca-certificates.crt (which SSL_CERT_FILE, NODE_EXTRA_CA_CERTS,
// REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE and GIT_SSL_CAINFO name), and the values and the CA's
// key go only into the proxy's configuration, egress.json in the sandbox's directory (mode
// 0600, host root's, never mounted). A secret that sets a header (BoundSecret.Header) has
// no placeholder and no variable: the sandbox holds nothing of it. A sandbox with bound
// secrets and network "all" gets the proxy with an open policy: network "allow" with empty
// lists.

// trustBundle is the sandbox's CA bundle, and the variables that point programs at it.
const trustBundle = "/etc/ssl/certs/ca-certificates.crt"

var trustEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}

// boundSecrets are a new sandbox's bound secrets, placeholders and CA.
type boundSecrets struct {
	secrets       []egress.Secret
	caCert, caKey []byte
}

// newBoundSecrets makes the placeholders and the CA of spec's bound secrets; nil when it
// has none.
func newBoundSecrets(spec provider.CreateSpec) (*boundSecrets, error) {
	if len(spec.BoundSecrets) == 0 {
		return nil, nil
	}
	b := &boundSecrets{}
	var hosts []string
	for _, name := range slices.Sorted(maps.Keys(spec.BoundSecrets)) {
		s := spec.BoundSecrets[name]
		if err := egress.CheckSecretHosts(s.Hosts); err != nil {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "bound secret %s: %v", name, err)
		}
		es := egress.Secret{Name: name, Value: s.Value, Hosts: s.Hosts, Header: s.Header}
		if s.Header == "" { // else the proxy sets the header: the sandbox holds nothing
			ph, err := egress.NewPlaceholder()
			if err != nil {
				return nil, err
			}
			es.Placeholder = ph
		}
		b.secrets = append(b.secrets, es)
		hosts = append(hosts, s.Hosts...)
	}
	var err error
	if b.caCert, b.caKey, err = egress.NewCA(hosts); err != nil {
		return nil, err
	}
	return b, nil
}

// readBoundSecrets reads the bound secrets of sandbox id from its proxy's configuration;
// none without a proxy or bound secrets.
func (p *Provider) readBoundSecrets(id string) ([]egress.Secret, error) {
	b, err := os.ReadFile(p.lay.egressConfig(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cfg egress.ProcessConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", p.lay.egressConfig(id), err)
	}
	return cfg.Secrets, nil
}

// snapshotBoundSecrets are the bound secrets of a sandbox made from snapshot snap: the
// snapshot's (secrets.json: the same names, placeholders, values and hosts, so that files
// holding a placeholder keep working) with a CA of the new sandbox's own; nil when it has
// none.
func (p *Provider) snapshotBoundSecrets(snap *snapMeta) (*boundSecrets, error) {
	if !snap.BoundSecrets {
		return nil, nil
	}
	b, err := os.ReadFile(p.lay.snapshotSecrets(snap.ID))
	if err != nil {
		return nil, err
	}
	bs := &boundSecrets{}
	if err := json.Unmarshal(b, &bs.secrets); err != nil || len(bs.secrets) == 0 {
		return nil, fmt.Errorf("snapshot %s: bad secrets.json", snap.ID)
	}
	var hosts []string
	for _, s := range bs.secrets {
		hosts = append(hosts, s.Hosts...)
	}
	if bs.caCert, bs.caKey, err = egress.NewCA(hosts); err != nil {
		return nil, err
	}
	return bs, nil
}

// snapshotProxyPassword gives n's egress proxy the password the snapshot snap kept
// (egress-proxy.json, mode 0600) when n names the same proxy and login without one: the
// policy a snapshot reports (SnapshotInfo.Policy, which a fork gives its children) is
// redacted, and without its password a child's proxy could not log in.
func (p *Provider) snapshotProxyPassword(snap *snapMeta, n provider.Network) (provider.Network, error) {
	if n.Proxy == nil || n.Proxy.Password != "" || n.Proxy.Username == "" {
		return n, nil
	}
	b, err := os.ReadFile(p.lay.snapshotProxy(snap.ID))
	if errors.Is(err, os.ErrNotExist) {
		return n, nil
	}
	if err != nil {
		return n, err
	}
	var kept provider.EgressProxy
	if err := json.Unmarshal(b, &kept); err != nil {
		return n, fmt.Errorf("snapshot %s: bad egress-proxy.json", snap.ID)
	}
	if kept.Address == n.Proxy.Address && kept.Username == n.Proxy.Username {
		n.Proxy = &kept
	}
	return n, nil
}

// env returns env with the placeholders under the secrets' names, and the trust variables
// unless env sets them.
func (b *boundSecrets) env(env map[string]string) map[string]string {
	if b == nil {
		return env
	}
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range trustEnv {
		if _, ok := out[k]; !ok {
			out[k] = trustBundle
		}
	}
	for _, s := range b.secrets {
		if s.Placeholder != "" {
			out[s.Name] = s.Placeholder
		}
	}
	return out
}

// bundle is the host's roots followed by the sandbox's CA; "" without bound secrets.
func (b *boundSecrets) bundle() string {
	if b == nil {
		return ""
	}
	roots, _ := os.ReadFile(filepath.Join(hostEtcDir, "ssl/certs/ca-certificates.crt"))
	if len(roots) > 0 && roots[len(roots)-1] != '\n' {
		roots = append(roots, '\n')
	}
	return string(roots) + string(b.caCert)
}

// egressProc is the record's part about the proxy.
type egressProc struct {
	PID   int            `json:"pid,omitempty"`
	Start uint64         `json:"start,omitempty"`
	Ports hostnet.Egress `json:"ports"` // the proxy's ports (no prefixes)
}

// Files of a sandbox's proxy, in its directory (never mounted into the sandbox).
func (l layout) egressConfig(id string) string { return filepath.Join(l.dir(id), "egress.json") }
func (l layout) egressPolicy(id string) string { return filepath.Join(l.dir(id), "egress-policy.json") }
func (l layout) egressLog(id string) string    { return filepath.Join(l.dir(id), "egress.log") }
func (l layout) egressErr(id string) string    { return filepath.Join(l.dir(id), "egress.err") }

// policyFile is the policy file of network n, and the policy it says: all is an empty
// policy, none one that allows nothing.
func policyFile(n provider.Network) (*egress.Policy, egress.File, error) {
	var f egress.File
	switch n = n.Normalized(); n.Mode {
	case provider.NetworkAll:
	case provider.NetworkNone:
		f.Nothing = true
	case provider.NetworkAllow:
		f.Allow, f.Deny, f.Proxy = n.Allow, n.Deny, n.Proxy
	default:
		return nil, f, provider.Errorf(provider.CodeInvalidArgument, "unknown network mode %q", n.Mode)
	}
	pol, err := f.Policy()
	if err != nil {
		return nil, f, provider.Errorf(provider.CodeInvalidArgument, "%v", err)
	}
	return pol, f, nil
}

// checkProxy refuses an egress proxy whose address the sandbox's proxy would never
// connect to (egress.ResolveProxy: not public, nor in Config.AllowPrivate), before
// anything is made or changed. Each connection resolves and checks it again.
func (p *Provider) checkProxy(ctx context.Context, px *provider.EgressProxy) error {
	if px == nil {
		return nil
	}
	if err := px.Validate(); err != nil {
		return err
	}
	var allow []netip.Prefix
	if p.net != nil {
		allow = p.net.AllowPrivate()
	}
	_, err := egress.ResolveProxy(ctx, px.Address, allow, egress.HostAddrs())
	return err
}

// writeEgressPolicy writes the policy file the proxy reads (mode 0600: it may hold the
// egress proxy's password).
func (p *Provider) writeEgressPolicy(id string, f egress.File) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return writeFileAtomic(p.lay.egressPolicy(id), b)
}

// readEgressPolicy reads the policy file of sandbox id (its generation cleared).
func (p *Provider) readEgressPolicy(id string) (egress.File, error) {
	var f egress.File
	b, err := os.ReadFile(p.lay.egressPolicy(id))
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s: %w", p.lay.egressPolicy(id), err)
	}
	f.Generation = 0
	return f, nil
}

// bindEgress binds the proxy's sockets of sandbox rec, records their ports (rec.Egress,
// written) and puts pol's rules in place: from then on the sandbox's DNS and TCP wait in
// the proxy's backlog, and nothing else but UDP pol allows leaves. The policy file must be
// written. Call with the network lock held, the bridge made. Undo: hostnet.Network.Detach (or
// dropEgress).
func (p *Provider) bindEgress(ctx context.Context, rec *record, pol *egress.Policy) (*hostnet.Sockets, error) {
	socks, ports, err := p.net.ListenEgress()
	if err != nil {
		return nil, err
	}
	rec.Egress = &egressProc{Ports: ports}
	if err := p.lay.writeRecord(rec); err != nil {
		socks.Close()
		return nil, err
	}
	if err := p.applyEgress(ctx, rec, ports, pol); err != nil {
		socks.Close()
		return nil, err
	}
	return socks, nil
}

// runEgress starts the proxy of sandbox rec on socks (bindEgress), records it, lets it serve
// and moves it into the sandbox's cgroups. The caller closes socks. Undo: stopEgress.
func (p *Provider) runEgress(ctx context.Context, rec *record, socks *hostnet.Sockets, agentPath string, bound *boundSecrets) error {
	// Started like the holder, into the sandbox's cgroups (holder.go).
	pid, start, serve, done, err := p.startEgress(ctx, rec, socks, agentPath, bound)
	if err != nil {
		return err
	}
	defer done()
	rec.Egress.PID, rec.Egress.Start = pid, start
	if err := p.lay.writeRecord(rec); err != nil {
		return err
	}
	if err := serve(); err != nil {
		return err
	}
	if err := protectFromOOM(pid); err != nil {
		return err
	}
	if rec.Cold {
		return nil // no cgroups while paused without memory: its boot brings it in (rejoinCgroups)
	}
	return joinCgroups(rec.ID, pid)
}

// startEgress starts the proxy of sandbox rec on socks. Like startHolder, the proxy waits
// for serve before it does anything, and exits if this process dies first; whether or not
// serve is called, call done.
func (p *Provider) startEgress(ctx context.Context, rec *record, socks *hostnet.Sockets, agentPath string, bound *boundSecrets) (pid int, start uint64, serve func() error, done func(), err error) {
	a, err := netip.ParseAddr(rec.IP)
	if err != nil {
		return 0, 0, nil, nil, err
	}
	cfg := egress.ProcessConfig{
		Config: egress.Config{Sandbox: a, Upstream: hostnet.Nameservers(), AllowPrivate: p.net.AllowPrivate(), Mirror: rec.Mirror, Log: p.lay.egressLog(rec.ID)},
		Policy: p.lay.egressPolicy(rec.ID),
	}
	if bound != nil {
		cfg.Secrets, cfg.CACert, cfg.CAKey = bound.secrets, string(bound.caCert), string(bound.caKey)
		cfg.ExtraRoots = string(p.cfg.EgressRoots)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return 0, 0, nil, nil, err
	}
	if err := os.WriteFile(p.lay.egressConfig(rec.ID), b, 0o600); err != nil {
		return 0, 0, nil, nil, err
	}
	files, err := socks.Files()
	if err != nil {
		return 0, 0, nil, nil, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	// $0 is the binary, $1 the config, $2 the error file: nothing is quoted into the script.
	// Its fds 3 to 6: egress.FDDNSUDP, FDDNSTCP, FDProxy, and the gate, FDGo.
	const script = `"$0" egress-proxy --config "$1" </dev/null >/dev/null 2>>"$2" & echo $!`
	pid, start, gate, err := startDetached(ctx, "the egress proxy", script,
		[]string{agentPath, p.lay.egressConfig(rec.ID), p.lay.egressErr(rec.ID)}, files, p.lay.egressErr(rec.ID))
	if err != nil {
		return 0, 0, nil, nil, err
	}
	return pid, start, openGate(gate, egress.ServeWord, "the egress proxy", pid), func() { gate.Close() }, nil
}

// readTail returns the last line of a small file, for an error message.
func readTail(path string) string {
	b, _ := os.ReadFile(path)
	sc := bufio.NewScanner(bytes.NewReader(b))
	last := ""
	for sc.Scan() {
		last = sc.Text()
	}
	return last
}

// signalEgress sends sig to the sandbox's proxy if it is still the process recorded (a pidfd
// pins it between the check and the signal). It reports whether the proxy was there.
func signalEgress(e *egressProc, sig unix.Signal) (fd int, ok bool) {
	if e == nil {
		return -1, false
	}
	return signalDetached(e.PID, e.Start, sig)
}

// stopEgress kills the sandbox's proxy and waits, up to timeout, for it to be gone.
func stopEgress(rec *record, timeout time.Duration) {
	if fd, ok := signalEgress(rec.Egress, unix.SIGKILL); ok {
		waitGone(fd, timeout)
	}
}

// applyEgress records the policy's firewall part for the sandbox at rec.IP and rewrites the
// bridge's rules. Call with the network lock held.
func (p *Provider) applyEgress(ctx context.Context, rec *record, ports hostnet.Egress, pol *egress.Policy) error {
	a, err := netip.ParseAddr(rec.IP)
	if err != nil {
		return err
	}
	ports.UDPAllow, ports.UDPDeny = p.net.UDPRules(pol)
	if err := p.net.SetEgress(a, leaseHolder(p.lay, rec.ID), ports); err != nil {
		return err
	}
	return p.net.ApplyFirewall(ctx)
}

var _ provider.NetworkSetter = (*Instance)(nil)

// SetNetwork replaces the policy of a sandbox: all is an empty policy, none one that allows
// nothing. The proxy has cut what the new policy refuses when it returns (unless the sandbox
// is paused: its proxy, in its cgroups, is frozen with it and takes the policy on resume,
// before any process of the sandbox runs again).
//
// A sandbox created with network "all" has no proxy until it is given a policy other than
// all: then it gets one as Create gives it (attachEgress), and is from then on a sandbox with
// network "allow". A sandbox created with network "none" has no interface: unsupported.
func (i *Instance) SetNetwork(ctx context.Context, n provider.Network) error {
	pol, file, err := policyFile(n)
	if err != nil {
		return err
	}
	if err := i.p.checkProxy(ctx, n.Proxy); err != nil {
		return err
	}
	file.Generation = time.Now().UnixNano()
	i.p.probed() // the bridge (p.net), in a process that only connected to the sandbox
	lk, rec, err := i.p.lockRecord(ctx, i.id)
	if err != nil {
		return err
	}
	defer lk.Unlock()
	switch {
	case rec.Network == string(provider.NetworkNone) || rec.IP == "" || i.p.net == nil:
		return provider.Errorf(provider.CodeUnsupported,
			"sandbox %s was created with network %q: it has no network interface, and none is added while it runs; create it with a policy that allows nothing (deny 0.0.0.0/0) to open it later", i.id, rec.Network)
	case rec.Egress == nil && n.Normalized().Mode == provider.NetworkAll:
		return nil // network "all" already
	case rec.Egress == nil:
		if err := i.p.attachEgress(ctx, rec, pol, file); err != nil {
			return provider.Wrap(err, provider.CodeProvider, "set_network")
		}
		return nil
	}
	if err := i.p.writeEgressPolicy(i.id, file); err != nil {
		return provider.Wrap(err, provider.CodeProvider, "set_network")
	}
	// UDP first: the firewall's part is in force when applyFirewall returns.
	nlk, err := i.p.net.Lock(ctx)
	if err != nil {
		return err
	}
	err = i.p.applyEgress(ctx, rec, hostnet.Egress{DNSUDP: rec.Egress.Ports.DNSUDP, DNSTCP: rec.Egress.Ports.DNSTCP, Proxy: rec.Egress.Ports.Proxy}, pol)
	nlk.Unlock()
	if err != nil {
		return provider.Wrap(err, provider.CodeProvider, "set_network")
	}
	// What the proxy answers is read from the Applied file, so an answer to an earlier
	// signal must not be taken for this one's (calls are serialised by the record's lock).
	applied := egress.Applied(i.p.lay.egressPolicy(i.id))
	if err := os.Remove(applied); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return provider.Wrap(err, provider.CodeProvider, "set_network")
	}
	fd, ok := signalEgress(rec.Egress, unix.SIGHUP)
	if !ok {
		return provider.Errorf(provider.CodeUnavailable, "sandbox %s's egress proxy (pid %d) is gone: nothing leaves the sandbox", i.id, rec.Egress.PID)
	}
	defer unix.Close(fd)
	if rec.Paused {
		return nil
	}
	return i.p.awaitPolicy(ctx, rec, fd, applied, strconv.FormatInt(file.Generation, 10))
}

// policyWait is how long SetNetwork waits for a running proxy to say it enforces the new
// policy (it reads a small file and walks its connections: milliseconds).
const policyWait = 5 * time.Second

// awaitPolicy waits until sandbox rec's proxy (pidfd fd) has written generation want to its
// Applied file. Whatever else happens, the error says why: what the proxy wrote when it
// kept its policy, that it exited (with the last line of its stderr), or that it said
// nothing in time.
func (p *Provider) awaitPolicy(ctx context.Context, rec *record, fd int, applied, want string) error {
	deadline := time.Now().Add(policyWait)
	for {
		b, _ := os.ReadFile(applied)
		switch got := string(b); {
		case got == want:
			return nil
		case strings.HasPrefix(got, egress.AppliedError):
			return provider.Errorf(provider.CodeProvider, "sandbox %s's egress proxy kept the policy it had: %s", rec.ID, strings.TrimPrefix(got, egress.AppliedError))
		}
		if gone(fd) {
			return provider.Errorf(provider.CodeUnavailable, "sandbox %s's egress proxy (pid %d) exited: nothing leaves the sandbox%s", rec.ID, rec.Egress.PID, stderrTail(p.lay.egressErr(rec.ID)))
		}
		if time.Now().After(deadline) {
			return provider.Errorf(provider.CodeUnavailable, "sandbox %s's egress proxy (pid %d) did not say it took the new policy within %s%s", rec.ID, rec.Egress.PID, policyWait, stderrTail(p.lay.egressErr(rec.ID)))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// stderrTail is "; its stderr ends: LINE" for the last line of the file at path, or "".
func stderrTail(path string) string {
	if last := readTail(path); last != "" {
		return "; its stderr ends: " + last
	}
	return ""
}

// attachEgress gives running sandbox rec, of network "all", the proxy and policy pol (file
// says it), with Create's steps (bindEgress, runEgress) in Create's order, and records it as
// a sandbox of network "allow". The connections it had open went straight out, past any
// proxy: they are cut (cutConnections), and the firewall resets any it missed. A failure
// leaves it as it was. Call with the sandbox locked.
func (p *Provider) attachEgress(ctx context.Context, rec *record, pol *egress.Policy, file egress.File) error {
	agentPath, err := p.agentPath()
	if err != nil {
		return err
	}
	// A sandbox paused without its memory runs nothing and holds no connection (under
	// runc and crun its network namespace went with its container): the rules and the
	// proxy are made, and its next boot starts under them.
	nsPath := ""
	if !rec.Cold {
		if nsPath, err = p.netnsPath(rec); err != nil {
			return err
		}
	}
	var socks *hostnet.Sockets
	defer func() { socks.Close() }()
	var open []hostnet.Conn // the sandbox's connections before its rules
	list := []steps.Step{
		{Name: "policy file", Do: func(ctx context.Context) error {
			return p.writeEgressPolicy(rec.ID, file)
		}, Undo: func() error {
			os.Remove(p.lay.egressPolicy(rec.ID))
			return nil
		}},
		{Name: "connections", Do: func(ctx context.Context) error {
			if nsPath == "" {
				return nil
			}
			var err error
			open, err = p.net.Connections(ctx, nsPath, rec.IP)
			return err
		}},
		{Name: "network", Do: func(ctx context.Context) error {
			lk, err := p.net.Lock(ctx)
			if err != nil {
				return err
			}
			defer lk.Unlock()
			socks, err = p.bindEgress(ctx, rec, pol)
			return err
		}, Undo: func() error {
			rec.Egress = nil
			return errors.Join(p.lay.writeRecord(rec), p.dropEgress(rec))
		}},
		{Name: "egress proxy", Do: func(ctx context.Context) error {
			return p.runEgress(ctx, rec, socks, agentPath, nil)
		}, Undo: func() error {
			stopEgress(rec, holderExitTimeout)
			return nil
		}},
		{Name: "record", Do: func(ctx context.Context) error {
			rec.Network = string(provider.NetworkAllow)
			return p.lay.writeRecord(rec)
		}},
	}
	if err := runSteps(ctx, list); err != nil {
		return err
	}
	if nsPath == "" {
		return nil
	}
	// The policy is in force: a failure to cut leaves connections the firewall resets at
	// their next packet out, so it is not undone.
	return p.net.CutConnections(context.WithoutCancel(ctx), nsPath, open)
}

// dropEgress removes the egress record of sandbox rec's address and rewrites the bridge's
// rules without it (hostnet.Network.Detach does it at teardown).
func (p *Provider) dropEgress(rec *record) error {
	ctx := context.Background()
	lk, err := p.net.Lock(ctx)
	if err != nil {
		return err
	}
	defer lk.Unlock()
	if !p.net.ClearEgress(rec.IP, leaseHolder(p.lay, rec.ID)) {
		return nil
	}
	return p.net.ApplyFirewall(ctx)
}

var _ provider.NetworkReporter = (*Instance)(nil)

// Network is the sandbox's network policy now: its record's mode, and for a sandbox with a
// proxy the policy file's lists and egress proxy (without its password).
func (i *Instance) Network(ctx context.Context) (provider.Network, error) {
	rec, err := i.p.lay.readRecord(i.id)
	if err != nil {
		return provider.Network{}, err
	}
	if rec.Egress == nil {
		return provider.Network{Mode: provider.NetworkMode(rec.Network)}.Normalized(), nil
	}
	f, err := i.p.readEgressPolicy(i.id)
	if err != nil {
		return provider.Network{}, provider.Wrap(err, provider.CodeProvider, "network")
	}
	if f.Nothing {
		return provider.Network{Mode: provider.NetworkNone}, nil
	}
	if len(f.Allow) == 0 && len(f.Deny) == 0 && f.Proxy == nil {
		return provider.Network{Mode: provider.NetworkAllow, Learn: true}, nil
	}
	return provider.Network{Mode: provider.NetworkAllow, Allow: f.Allow, Deny: f.Deny, Proxy: f.Proxy.Redacted()}, nil
}

var _ provider.EgressReporter = (*Instance)(nil)

// Egress reads the sandbox's proxy log (egress.log in its directory; the cursor is a byte
// offset in it). A sandbox without a policy has no proxy: unsupported.
func (i *Instance) Egress(ctx context.Context, after string) (provider.EgressLog, error) {
	rec, err := i.p.lay.readRecord(i.id)
	if err != nil {
		return provider.EgressLog{}, err
	}
	if rec.Network != string(provider.NetworkAllow) {
		return provider.EgressLog{}, provider.Errorf(provider.CodeUnsupported,
			"sandbox %s has network %q: only a sandbox with a policy (allow or deny lists, or learn) records its egress", i.id, rec.Network)
	}
	var off int64
	if after != "" {
		if off, err = strconv.ParseInt(after, 10, 64); err != nil || off < 0 {
			return provider.EgressLog{}, provider.Errorf(provider.CodeInvalidArgument, "egress cursor %q is not one this sandbox gave", after)
		}
	}
	entries, next, more, err := egress.ReadLog(i.p.lay.egressLog(i.id), off)
	if err != nil {
		return provider.EgressLog{}, provider.Wrap(err, provider.CodeProvider, "egress")
	}
	return provider.EgressLog{Entries: entries, Cursor: strconv.FormatInt(next, 10), More: more}, nil
}
