package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tupper-dev/tupper/egress"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/internal/audit"
	"github.com/tupper-dev/tupper/store"
)

// E2B's secrets (/secrets) are the store's secrets (store.Secret) of the request's API key:
// another key neither sees nor uses them. A value is write-only: no answer holds it. A
// sandbox uses them through E2B's network rules: a header a rule sets for a host, whose
// value names ${e2b.secrets.NAME}, is resolved when the sandbox is created and becomes a
// bound secret that sets that header (sandbox.BoundSecret.Header): the egress proxy,
// outside the sandbox, writes it into the requests to that host, and the sandbox never
// holds the value. See docs/e2b.md.

// Limits of a secret: E2B's for metadata; ours for names and values, which go into HTTP
// headers.
const (
	maxSecretName     = 256
	maxSecretValue    = 64 << 10
	maxMetadataPairs  = 32
	maxMetadataKey    = 128
	maxMetadataValue  = 1024
	maxMetadataBytes  = 8192
	secretPlaceholder = "e2b.secrets."
)

func (s *Server) secretRoutes(h func(string, func(http.ResponseWriter, *http.Request, string))) {
	h("GET /secrets", s.listSecrets)
	h("POST /secrets", s.createSecret)
	h("GET /secrets/{secretID}", s.getSecret)
	h("POST /secrets/{secretID}", s.updateSecret)
	h("DELETE /secrets/{secretID}", s.deleteSecret)
}

// secretJSON is E2B's Secret: metadata only.
type secretJSON struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

func toSecretJSON(sec store.Secret) secretJSON {
	return secretJSON{SecretID: sec.ID, Name: sec.Name, CurrentVersion: sec.Version, Metadata: sec.Metadata, CreatedAt: sec.CreatedAt, UpdatedAt: sec.UpdatedAt}
}

// secretBody is E2B's NewSecret and SecretUpdate.
type secretBody struct {
	Name     *string           `json:"name"`
	Value    *string           `json:"value"`
	Metadata map[string]string `json:"metadata"`
}

// secretName checks a secret's name as E2B's SDKs do (not empty, no '{', '}' or control
// characters: it is written inside ${e2b.secrets.NAME}), and E2B's API (the sec_ prefix is
// its ids'), and returns its canonical form, in lower case.
func secretName(name string) (string, error) {
	bad := func(why string) error {
		return provider.Errorf(provider.CodeInvalidArgument, "secret name %q is not usable: %s", name, why)
	}
	switch {
	case name == "":
		return "", provider.Errorf(provider.CodeInvalidArgument, "a secret name cannot be empty")
	case !utf8.ValidString(name):
		return "", bad("it is not UTF-8")
	case len(name) > maxSecretName:
		return "", bad(fmt.Sprintf("it is longer than %d bytes", maxSecretName))
	}
	for _, r := range name {
		if r == '{' || r == '}' || r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return "", bad("a secret name cannot contain '{', '}' or control characters, since it is written inside ${e2b.secrets.NAME}")
		}
	}
	name = strings.ToLower(name)
	if strings.HasPrefix(name, store.SecretIDPrefix) {
		return "", bad("the " + store.SecretIDPrefix + " prefix is reserved for secret ids")
	}
	return name, nil
}

// secretValue checks a value: present, not empty, bounded, and fit for an HTTP header.
func secretValue(v *string) (string, error) {
	switch {
	case v == nil || *v == "":
		return "", provider.Errorf(provider.CodeInvalidArgument, "value is required")
	case len(*v) > maxSecretValue:
		return "", provider.Errorf(provider.CodeInvalidArgument, "a secret's value is at most %d bytes", maxSecretValue)
	case strings.ContainsAny(*v, "\x00\r\n"):
		return "", provider.Errorf(provider.CodeInvalidArgument, "a secret's value cannot contain a NUL or a line break: it is written into HTTP headers")
	}
	return *v, nil
}

// checkMetadata applies E2B's limits on a secret's metadata.
func checkMetadata(md map[string]string) error {
	if len(md) > maxMetadataPairs {
		return provider.Errorf(provider.CodeInvalidArgument, "metadata has %d entries, at most %d", len(md), maxMetadataPairs)
	}
	total := 0
	for k, v := range md {
		if len(k) > maxMetadataKey || len(v) > maxMetadataValue {
			return provider.Errorf(provider.CodeInvalidArgument, "metadata keys are at most %d bytes and values %d", maxMetadataKey, maxMetadataValue)
		}
		total += len(k) + len(v)
	}
	if total > maxMetadataBytes {
		return provider.Errorf(provider.CodeInvalidArgument, "metadata is at most %d bytes in all", maxMetadataBytes)
	}
	return nil
}

func (s *Server) createSecret(w http.ResponseWriter, r *http.Request, keyID string) {
	var req secretBody
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Name == nil {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "name is required"))
		return
	}
	name, err := secretName(*req.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	value, err := secretValue(req.Value)
	if err == nil {
		err = checkMetadata(req.Metadata)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	sec, err := s.st.CreateSecret(r.Context(), keyID, name, value, req.Metadata)
	if err != nil {
		writeError(w, err)
		return
	}
	audit.SetTarget(r.Context(), sec.ID) // its id: never its name or value
	writeJSON(w, http.StatusCreated, toSecretJSON(sec))
}

// secretRef is the path's secret: an id, or a name in any case.
func secretRef(r *http.Request) string { return strings.ToLower(r.PathValue("secretID")) }

func (s *Server) getSecret(w http.ResponseWriter, r *http.Request, keyID string) {
	sec, err := s.st.GetSecret(r.Context(), keyID, secretRef(r))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toSecretJSON(sec))
}

func (s *Server) updateSecret(w http.ResponseWriter, r *http.Request, keyID string) {
	var req secretBody
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Name != nil {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "a secret's name cannot be changed"))
		return
	}
	value, err := secretValue(req.Value)
	if err == nil {
		err = checkMetadata(req.Metadata)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	sec, err := s.st.UpdateSecret(r.Context(), keyID, secretRef(r), value, req.Metadata)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toSecretJSON(sec))
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request, keyID string) {
	if err := s.st.DeleteSecret(r.Context(), keyID, secretRef(r)); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listSecrets is GET /secrets: the key's secrets, oldest first, paged by limit (1 to 100,
// default 100) and nextToken (X-Next-Token of the previous page).
func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request, keyID string) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, provider.Errorf(provider.CodeInvalidArgument, "limit must be between 1 and 100"))
			return
		}
		limit = n
	}
	var cursor int64
	if v := q.Get("nextToken"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err == nil {
			cursor, err = strconv.ParseInt(string(b), 10, 64)
		}
		if err != nil || cursor < 0 {
			writeError(w, provider.Errorf(provider.CodeInvalidArgument, "nextToken is not valid"))
			return
		}
	}
	list, next, err := s.st.Secrets(r.Context(), keyID, cursor, limit)
	if err != nil {
		writeError(w, err)
		return
	}
	if next != 0 {
		w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(next, 10))))
	}
	out := make([]secretJSON, 0, len(list))
	for _, sec := range list {
		out = append(out, toSecretJSON(sec))
	}
	writeJSON(w, http.StatusOK, out)
}

// ruleHeaders maps E2B's network.rules (host → ordered rules, each {"transform":
// {"headers": {NAME: VALUE}}}) onto bound secrets that set those headers, with the
// ${e2b.secrets.NAME} in each value replaced by the key's secret. A later rule's header
// overrides an earlier one's for the same host; rule sets of different hosts are not
// merged: a request gets those of the most specific matching host (the egress proxy's
// precedence, provider.BoundSecret.Header), as E2B says. Other transforms, rules for
// addresses, and the other ${e2b.…} placeholders (workload identity) are not supported; a
// secret the key does not have is invalid.
func (s *Server) ruleHeaders(ctx context.Context, keyID string, raw json.RawMessage) (map[string]sandbox.BoundSecret, error) {
	if !isSet(raw) {
		return nil, nil
	}
	var rules map[string][]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &rules); err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "network.rules is an object of hosts to lists of rules: %v", err)
	}
	hosts := slices.Sorted(maps.Keys(rules))
	type header struct{ host, name, value string }
	var headers []header
	for _, host := range hosts {
		if _, err := netip.ParsePrefix(host); err == nil || isAddr(host) {
			return nil, unsupported("network.rules for %s: header transforms need the host's name (the proxy writes them into the requests it reads for that name); rules for addresses and CIDR ranges are not supported", host)
		}
		if err := egress.CheckSecretHosts([]string{host}); err != nil {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "network.rules: %v", err)
		}
		set := map[string]string{}
		for i, rule := range rules[host] {
			for k := range rule {
				if k != "transform" {
					return nil, unsupported("network.rules[%q][%d].%s is not supported: only transform.headers is", host, i, k)
				}
			}
			if !isSet(rule["transform"]) {
				continue
			}
			var tr map[string]json.RawMessage
			if err := json.Unmarshal(rule["transform"], &tr); err != nil {
				return nil, provider.Errorf(provider.CodeInvalidArgument, "network.rules[%q][%d].transform is an object: %v", host, i, err)
			}
			for k := range tr {
				if k != "headers" {
					return nil, unsupported("network.rules[%q][%d].transform.%s is not supported: only headers is", host, i, k)
				}
			}
			var hs map[string]string
			if err := json.Unmarshal(tr["headers"], &hs); err != nil && isSet(tr["headers"]) {
				return nil, provider.Errorf(provider.CodeInvalidArgument, "network.rules[%q][%d].transform.headers is an object of header names to strings", host, i)
			}
			for name, v := range hs {
				if err := egress.CheckHeader(name); err != nil {
					return nil, provider.Errorf(provider.CodeInvalidArgument, "network.rules[%q]: %v", host, err)
				}
				set[http.CanonicalHeaderKey(name)] = v
			}
		}
		for _, name := range slices.Sorted(maps.Keys(set)) {
			headers = append(headers, header{host, name, set[name]})
		}
	}
	if len(headers) == 0 {
		return nil, nil
	}
	var names []string
	for _, h := range headers {
		refs, err := placeholders(h.value, nil)
		if err != nil {
			return nil, provider.Errorf(provider.CodeOf(err), "network.rules[%q] header %s: %s", h.host, h.name, message(err))
		}
		names = append(names, refs...)
	}
	values, err := s.st.SecretValues(ctx, keyID, names)
	if err != nil {
		if provider.CodeOf(err) == provider.CodeNotFound {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "network.rules: %s (create it with POST /secrets)", message(err))
		}
		return nil, err
	}
	out := make(map[string]sandbox.BoundSecret, len(headers))
	for i, h := range headers {
		var b strings.Builder
		if _, err := placeholders(h.value, func(lit, name string) {
			b.WriteString(lit)
			b.WriteString(values[name])
		}); err != nil {
			return nil, err
		}
		v := b.String()
		if strings.ContainsAny(v, "\x00\r\n") {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "network.rules[%q] header %s: a header value cannot contain a NUL or a line break", h.host, h.name)
		}
		// The names keep the rules' order (provider.BoundSecret.Header).
		out[fmt.Sprintf("E2B_RULE_%04d", i)] = sandbox.BoundSecret{Value: v, Hosts: []string{h.host}, Header: h.name}
	}
	return out, nil
}

// placeholders returns the names of the secrets v names as ${e2b.secrets.NAME} (NAME in
// any case; returned in lower case), and, when emit is not nil, calls it for each piece of
// v: the literal text before a placeholder and the placeholder's name (the last call's
// name is "" and lit is the rest). Other ${…} text is literal; ${e2b.…} other than secrets
// (workload identity tokens) is not supported.
func placeholders(v string, emit func(lit, name string)) ([]string, error) {
	var names []string
	var lit strings.Builder
	for {
		i := strings.Index(v, "${")
		if i < 0 {
			break
		}
		lit.WriteString(v[:i])
		rest := v[i+2:]
		if !strings.HasPrefix(rest, "e2b.") {
			lit.WriteString("${")
			v = rest
			continue
		}
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "${%s has no closing }", rest)
		}
		ref := rest[:j]
		name, ok := strings.CutPrefix(ref, secretPlaceholder)
		if !ok {
			return nil, unsupported("${%s} is not supported: only ${e2b.secrets.NAME} is", ref)
		}
		name, err := secretName(name)
		if err != nil {
			return nil, err
		}
		names = append(names, name)
		if emit != nil {
			emit(lit.String(), name)
		}
		lit.Reset()
		v = rest[j+1:]
	}
	lit.WriteString(v)
	if emit != nil {
		emit(lit.String(), "")
	}
	return names, nil
}

func isAddr(s string) bool {
	_, err := netip.ParseAddr(strings.Trim(s, "[]"))
	return err == nil
}
