package sandbox

import (
	"context"
	"net/netip"
	"slices"

	"github.com/tupper-dev/tupper/provider"
)

// EgressLog is a page of a sandbox's egress record: what a sandbox with a network policy
// asked for and reached, and what its policy refused (see provider.EgressReporter).
type EgressLog = provider.EgressLog

// EgressEntry is one destination of an EgressLog.
type EgressEntry = provider.EgressEntry

// Egress returns the sandbox's egress record after cursor ("" from the start), one page at
// a time: pass the page's Cursor to read on while More. Only a sandbox with a network policy
// (allow or deny lists, or Learn) has one; the others, and providers without
// provider.EgressReporter, answer CodeUnsupported.
func (b *Sandbox) Egress(ctx context.Context, after string) (EgressLog, error) {
	const op = "egress"
	r, ok := b.inst.(provider.EgressReporter)
	if !ok {
		return EgressLog{}, errorf(CodeUnsupported, op, "provider %s does not record a sandbox's egress", b.Provider)
	}
	l, err := r.Egress(ctx, after)
	return l, wrapProvider(err, op)
}

// EgressSince reads the sandbox's egress record from after to its end (at most max entries;
// 0 is 10000) and returns the entries with the cursor to read on from.
func (b *Sandbox) EgressSince(ctx context.Context, after string, max int) ([]EgressEntry, string, error) {
	if max <= 0 {
		max = 10000
	}
	var out []EgressEntry
	for {
		l, err := b.Egress(ctx, after)
		if err != nil {
			return out, after, err
		}
		out = append(out, l.Entries...)
		if l.Cursor == after || !l.More || len(out) >= max {
			return out, l.Cursor, nil
		}
		after = l.Cursor
	}
}

// Denied returns the distinct destinations refused in entries, in the order first refused:
// a name where the sandbox gave one, else an address and port.
func Denied(entries []EgressEntry) []string {
	var out []string
	for _, e := range entries {
		if e.Allowed {
			continue
		}
		d := e.Name
		if d == "" {
			d = e.Dest
		}
		if d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// LearnAllowList returns the allow list that would have permitted what entries record as
// reached (a learn mode's output): each name asked and answered, and each TLS or HTTP name
// connected to; an address connected to without a name, unless an allowed name's answer
// held it. Sorted, no duplicates. Refused entries add nothing: they were never reached.
func LearnAllowList(entries []EgressEntry) []string {
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, e := range entries {
		if !e.Allowed || e.Reason != "" {
			continue
		}
		switch {
		case e.Kind == "dns" && e.Type == "A":
			add(e.Name)
		case e.Kind == "connect" && e.Name != "":
			add(e.Name)
		case e.Kind == "connect" && e.Via != "":
			add(e.Via)
		case e.Kind == "connect":
			if ap, err := netip.ParseAddrPort(e.Dest); err == nil {
				add(ap.Addr().String())
			}
		}
	}
	slices.Sort(out)
	return out
}
