// Package spec is the wire protocol between the host and the in-sandbox agent: the Connect
// services in process and filesystem (generated from the .proto files beside them by
// generate.sh), and the protocol version both sides check before they talk.
//
// The agent is a separate binary (tupper agent) that a host program built from another
// release may run. So the two check each other once, before any request:
//
//   - the host asks a binary for its version before using it as an agent: run with the
//     arguments "agent --protocol", a tupper binary prints ProbeReply, a space and Version
//     on one line and exits 0 (an older one fails on the unknown flag);
//   - the host writes the Version it speaks into the agent's config ("protocol"), and an
//     agent of another version refuses to start, saying both numbers.
package spec

// Version is the agent protocol's version. Raise it with any change that an agent or a host
// of the previous version would misread: a request, answer or config field whose meaning
// changes or that one side needs from the other. 2: the config's bootIDFile and endFile, which
// an agent of version 1 refuses as unknown fields.
const Version = 2

// ProbeReply starts the line "tupper agent --protocol" prints: ProbeReply, a space and the
// decimal Version.
const ProbeReply = "tupper-agent-protocol"

// ProbeFlag is the flag of "tupper agent" that prints the protocol version and exits.
const ProbeFlag = "--protocol"
