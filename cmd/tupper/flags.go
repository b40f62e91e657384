package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/template"
)

// providerFlags selects and configures the provider.
type providerFlags struct {
	name string
	url  string // a tupper server: use the remote provider
}

func (f *providerFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.name, "provider", os.Getenv("TUPPER_PROVIDER"),
		"provider to use (default: $TUPPER_PROVIDER, else the platform default: local on Linux)")
	cmd.Flags().StringVar(&f.url, "url", os.Getenv("TUPPER_URL"),
		"a tupper server to use instead of this machine (default: $TUPPER_URL; the API key is $TUPPER_API_KEY)")
}

// resolve returns the provider to create sandboxes with.
func (f *providerFlags) resolve(ctx context.Context) (provider.Provider, error) {
	return f.resolveFor(ctx, false)
}

// resolveExisting returns the provider of sandboxes that already exist, without checking
// that it could create new ones (for the local provider, that check probes the host).
func (f *providerFlags) resolveExisting(ctx context.Context) (provider.Provider, error) {
	return f.resolveFor(ctx, true)
}

// connect returns a handle to the existing sandbox id of the provider the flags name; the
// caller closes it.
func (f *providerFlags) connect(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	prov, err := f.resolveExisting(ctx)
	if err != nil {
		return nil, err
	}
	return sandbox.Connect(ctx, prov, id, sandbox.ConnectOptions{})
}

func (f *providerFlags) resolveFor(ctx context.Context, existing bool) (provider.Provider, error) {
	if f.url != "" {
		if f.name != "" && f.name != remote.Name {
			return nil, fmt.Errorf("--url (or $TUPPER_URL) names a server, which uses the remote provider; drop --provider %s or unset TUPPER_URL", f.name)
		}
		p := remote.New(remote.Config{URL: f.url, APIKey: os.Getenv("TUPPER_API_KEY")})
		if err := p.Available(ctx); err != nil {
			return nil, err
		}
		return p, nil
	}
	if err := checkProviderName(f.name); err != nil {
		return nil, err
	}
	return provider.Resolve(ctx, provider.ResolveOptions{Name: f.name, Existing: existing})
}

// resolveLocal returns the local provider configured by opts, for the flags that configure
// it (flags names them, for an error): through the registry, once, and available. Another
// provider takes none of them.
func (f *providerFlags) resolveLocal(ctx context.Context, opts localOptions, flags string) (provider.Provider, error) {
	cfg, err := localConfig(opts, flags)
	if err != nil {
		return nil, err
	}
	name := f.name
	if f.url != "" {
		name = remote.Name
	}
	if name != "" && name != "local" {
		return nil, fmt.Errorf("%s needs the local provider, not %s", flags, name)
	}
	return provider.Resolve(ctx, provider.ResolveOptions{Name: "local", Config: cfg})
}

// allowPrivateUsage is the help of --allow-private (run, create and serve).
const allowPrivateUsage = "let sandboxes with network all reach this private, link-local or other non-public IPv4 range (CIDR or address, repeatable; local provider; see docs/security.md)"

// parseAllowPrivate parses --allow-private values: prefixes, or addresses meaning /32.
func parseAllowPrivate(vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return nil, fmt.Errorf("--allow-private %q: want an IPv4 range such as 10.1.2.0/24 or an address", v)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if !p.Addr().Is4() {
			return nil, fmt.Errorf("--allow-private %q: sandboxes have IPv4 only", v)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// localOptions are the flags that configure the local provider itself (resolveLocal).
type localOptions struct {
	pool             int
	allowPrivate     []netip.Prefix
	noTemplateMirror bool
	runtime          string
	bootImages       bool
}

// noTemplateMirrorUsage is the help of --no-template-mirror (run, create and serve).
const noTemplateMirrorUsage = "keep sandboxes of the debian and base templates (and those built from them) from the private or reserved address of the apt mirror they were made from, which they reach by default (local provider; see docs/network.md)"

// createFlags are the sandbox options of run and create.
type createFlags struct {
	providerFlags
	runtime      string
	template     string
	network      string
	allow, deny  []string
	learn        bool
	egressProxy  string
	env          []string
	secrets      []string
	labels       []string
	size         string
	allowPrivate []string
	noMirror     bool
	volumes      []string
}

// resolve returns the provider to create sandboxes with, opening the --allow-private ranges.
func (f *createFlags) resolve(ctx context.Context) (provider.Provider, error) {
	allow, err := parseAllowPrivate(f.allowPrivate)
	if err != nil {
		return nil, err
	}
	var given []string // the flags that configure the local provider, for an error
	if len(allow) > 0 {
		given = append(given, "--allow-private")
	}
	if f.noMirror {
		given = append(given, "--no-template-mirror")
	}
	var prov provider.Provider
	if len(given) == 0 {
		prov, err = f.providerFlags.resolve(ctx)
	} else {
		prov, err = f.providerFlags.resolveLocal(ctx, localOptions{allowPrivate: allow, noTemplateMirror: f.noMirror}, strings.Join(given, " and "))
	}
	if err != nil {
		return nil, err
	}
	f.announceBuiltin(prov)
	return prov, nil
}

// announceBuiltin says, before a create of the local provider that will make a built-in
// template (debian, base) first, why it takes a while.
func (f *createFlags) announceBuiltin(prov provider.Provider) {
	b, builtin := template.BuiltinNamed(f.template)
	if !builtin || prov.Name() != "local" {
		return
	}
	if t, err := sandbox.InspectTemplate(context.Background(), prov, f.template); err == nil && t.Layers == 0 {
		fmt.Fprintf(os.Stderr, "tupper: making the %s template from this machine's apt mirror (once; %s)\n", b.Name, b.Takes)
	}
}

func (f *createFlags) register(cmd *cobra.Command) {
	f.providerFlags.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.runtime, "runtime", "", "OCI runtime of the local provider: crun, runc, or runsc for gVisor (default: crun when it works here, else runc; see tupper doctor)")
	fl.StringVar(&f.template, "template", "", "template to start from (local default: host)")
	fl.StringVar(&f.network, "network", "all", "network: all or none")
	fl.StringArrayVar(&f.allow, "allow", nil, "allow egress to DEST only: a domain, *.domain, an IP address or a CIDR (repeatable; anything not allowed is denied; see docs/network.md)")
	fl.StringArrayVar(&f.deny, "deny", nil, "deny egress to DEST: a domain, *.domain, an IP address or a CIDR (repeatable; wins over --allow)")
	fl.BoolVar(&f.learn, "learn", false, "learn mode: record every destination the sandbox reaches (through the egress policy, refusing nothing unless --allow/--deny say so); run prints the allow list that would permit it, tupper network ID --learned prints it later")
	fl.StringVar(&f.egressProxy, "egress-proxy", "", "tunnel the sandbox's allowed TCP through this SOCKS5 proxy, outside the sandbox: socks5://[USER@]HOST:PORT, the password in $"+egressProxyPasswordEnv+" (never on the command line); a proxy that is down fails connections, nothing goes out directly (see docs/network.md)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "environment variable K=V for every command (repeatable)")
	fl.StringArrayVar(&f.secrets, "secret", nil, "secret NAME=VALUE, or NAME alone to take $NAME from this environment (repeatable): set in the sandbox's environment, redacted from output; NAME@HOST,HOST…[=VALUE] binds it to hosts (names or *.domain): the sandbox sees only a placeholder, which the egress proxy replaces in HTTP(S) requests to those hosts (see docs/network.md)")
	fl.StringArrayVar(&f.labels, "label", nil, "label K=V (repeatable)")
	fl.StringVar(&f.size, "size", "", "machine size: small, medium or large")
	fl.StringArrayVar(&f.allowPrivate, "allow-private", nil, allowPrivateUsage)
	fl.BoolVar(&f.noMirror, "no-template-mirror", false, noTemplateMirrorUsage)
	fl.StringArrayVarP(&f.volumes, "volume", "v", nil, "mount volume NAME at /path, read-only with :ro (NAME:/path[:ro], repeatable; see tupper volume)")
}

func (f *createFlags) options() (sandbox.CreateOptions, error) {
	opts := sandbox.CreateOptions{Runtime: f.runtime, Template: f.template}
	var err error
	if opts.Network, err = parseNetwork(f.network); err != nil {
		return opts, err
	}
	if len(f.allow) > 0 || len(f.deny) > 0 || f.learn {
		if f.network == "none" {
			return opts, fmt.Errorf("--allow, --deny and --learn need a network: drop --network none")
		}
		opts.Network = sandbox.Network{Mode: provider.NetworkAllow, Allow: f.allow, Deny: f.deny, Learn: f.learn}
	}
	if f.egressProxy != "" {
		if f.network == "none" {
			return opts, fmt.Errorf("--egress-proxy needs a network: drop --network none")
		}
		px, err := parseEgressProxy(f.egressProxy, os.LookupEnv)
		if err != nil {
			return opts, err
		}
		opts.Network.Mode, opts.Network.Proxy = provider.NetworkAllow, px
	}
	if f.size != "" {
		opts.Size = sandbox.Size{Name: f.size}
	}
	if opts.Env, err = parsePairs("--env", f.env); err != nil {
		return opts, err
	}
	if opts.Labels, err = parsePairs("--label", f.labels); err != nil {
		return opts, err
	}
	if opts.Secrets, opts.BoundSecrets, err = parseSecrets(f.secrets, os.LookupEnv); err != nil {
		return opts, err
	}
	for _, v := range f.volumes {
		m, err := provider.ParseVolumeMount(v)
		if err != nil {
			return opts, err
		}
		opts.Volumes = append(opts.Volumes, m)
	}
	return opts, opts.Validate()
}

// egressProxyPasswordEnv holds --egress-proxy's password: a command line is readable by
// every user of the host (ps, /proc), an environment only by its owner.
const egressProxyPasswordEnv = "TUPPER_EGRESS_PROXY_PASSWORD"

// parseEgressProxy parses --egress-proxy socks5://[USER@]HOST:PORT, its password from
// $TUPPER_EGRESS_PROXY_PASSWORD (looked up with env); a password in the URL is refused.
func parseEgressProxy(v string, env func(string) (string, bool)) (*provider.EgressProxy, error) {
	rest, ok := strings.CutPrefix(v, "socks5://")
	if !ok {
		rest, ok = strings.CutPrefix(v, "socks5h://")
	}
	if !ok {
		return nil, fmt.Errorf("--egress-proxy %q: want socks5://[USER@]HOST:PORT", provider.StripCredentials(v))
	}
	px := &provider.EgressProxy{Address: strings.TrimSuffix(rest, "/")}
	if user, addr, ok := strings.Cut(px.Address, "@"); ok {
		if strings.Contains(user, ":") {
			return nil, fmt.Errorf("--egress-proxy: put the password in $%s, not on the command line (every user of the host can read it there)", egressProxyPasswordEnv)
		}
		px.Username, px.Address = user, addr
	}
	if pw, ok := env(egressProxyPasswordEnv); ok && pw != "" {
		if px.Username == "" {
			return nil, fmt.Errorf("--egress-proxy: $%s is set but the URL has no USER@", egressProxyPasswordEnv)
		}
		px.Password = pw
	}
	if err := px.Validate(); err != nil {
		return nil, fmt.Errorf("--egress-proxy: %w", err)
	}
	return px, nil
}

// parseNetwork parses --network: all (also "") or none.
func parseNetwork(v string) (sandbox.Network, error) {
	switch v {
	case "", "all":
		return sandbox.NetworkAll, nil
	case "none":
		return sandbox.NetworkNone, nil
	}
	return sandbox.Network{}, fmt.Errorf("--network %q: use all or none", v)
}

func parsePairs(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, p)
		}
		m[k] = v
	}
	return m, nil
}

// parseSecrets parses --secret values: NAME=VALUE, NAME (the value is $NAME, looked up with
// env), and NAME@HOST,HOST…=VALUE or NAME@HOST,HOST… for a bound secret. A name has no @ or
// =, and hosts no =, so the first = always starts the value, whatever it holds.
func parseSecrets(vals []string, env func(string) (string, bool)) (plain map[string]string, bound map[string]sandbox.BoundSecret, err error) {
	for _, v := range vals {
		spec, value, hasValue := strings.Cut(v, "=")
		name, hosts, isBound := strings.Cut(spec, "@")
		if name == "" {
			return nil, nil, fmt.Errorf("--secret %q: want NAME=VALUE, NAME, or NAME@HOST,…[=VALUE]", v)
		}
		if !hasValue {
			var ok bool
			if value, ok = env(name); !ok {
				return nil, nil, fmt.Errorf("--secret %s: no =VALUE and no $%s in this environment", spec, name)
			}
		}
		if !isBound {
			if plain == nil {
				plain = map[string]string{}
			}
			plain[name] = value
			continue
		}
		if bound == nil {
			bound = map[string]sandbox.BoundSecret{}
		}
		var hs []string
		for _, h := range strings.Split(hosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hs = append(hs, h)
			}
		}
		bound[name] = sandbox.BoundSecret{Value: value, Hosts: hs}
	}
	return plain, bound, nil
}
