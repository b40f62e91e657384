// Package agentinst is the half of a provider.Instance that talks to the process inside the
// sandbox: Tupper's agent (package agent), or an E2B envd, whose protocol the agent speaks.
// It turns the provider contract's exec, files, file-system operations, terminals and
// activity into calls of agent/client, and the answers back into the contract's: errors
// with their codes (one mapping, provider/connectcode, for every RPC), exit statuses and
// signals, file types and modes. A provider whose sandboxes run the agent writes only the
// other half: making, finding, pausing and destroying sandboxes, and reaching the agent.
//
// # Two levels
//
// Envd is what envd itself can do: Exec (and detached exec), ReadFile, WriteFile (a mode is
// set afterwards with chmod) and provider.FileSystem. providers/e2b embeds it: E2B's envd
// has nothing more.
//
// Agent embeds Envd and adds what only Tupper's agent serves: ranged reads
// (provider.RangeReader), modes written with the file, activity (provider.ActivityReporter),
// port tunnels (provider.PortDialer), terminals (provider.Terminaler and
// provider.CommandTerminaler) and the agent's own lifetime deadline (SetDeadline).
// providers/local embeds it, and so does every later provider whose sandboxes run the agent
// (Docker, Kubernetes).
//
// # Embedding
//
// A provider's instance embeds *Agent (or *Envd) and supplies, in Config:
//
//   - Client: an agent/client.Client that reaches this sandbox's agent (a unix socket the
//     provider dials safely, a connection through the container engine, an HTTP base URL);
//   - Check (optional): what refuses a call before it is sent: CodeConflict for a paused
//     sandbox, whose agent cannot answer, CodeNotFound for one that is gone;
//   - Gone (optional): whether the sandbox has stopped, asked when a call failed in a way
//     the protocol does not explain (the agent unreachable or failing), so that a sandbox
//     that ended answers CodeNotFound rather than a transport error.
//
// and implements the rest of provider.Instance itself: Info and PreviewURL, and whichever
// lifecycle interfaces it has (provider.Pauser, provider.TimeoutSetter, provider.Snapshotter,
// ...). Its own calls to the agent map their errors with Err, as the embedded methods do.
//
//	type Instance struct {
//		*agentinst.Agent
//		...
//	}
//
//	func (p *Provider) instance(id string) *Instance {
//		i := &Instance{...}
//		i.Agent = agentinst.NewAgent(agentinst.Config{ID: id, Client: p.agentClient(id), Check: i.check, Gone: i.gone})
//		return i
//	}
//
// Every method may be called concurrently. Everything the agent sends is untrusted (code in
// the sandbox can replace it): messages are bounded by the client and stripped of
// credentials here.
package agentinst
