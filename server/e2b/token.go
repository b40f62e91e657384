package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/url"
	"strconv"
	"time"

	"github.com/tupper-dev/tupper/store"
)

// envdToken is the sandbox's envd access token (sbt_ and 40 hex digits), derived from the id
// so the server can recompute it to check signed URLs. It is a credential of the data plane
// only (envd's API: commands, files, signed /files URLs): the store does not hold it, so the
// native API and the control plane do not take it.
func (s *Server) envdToken(id string) string {
	m := hmac.New(sha256.New, s.tokenKey)
	m.Write([]byte("e2b envd access token\x00" + id))
	return store.TokenPrefix + hex.EncodeToString(m.Sum(nil))[:40]
}

// trafficToken is the traffic access token of a sandbox created with
// network.allowPublicTraffic false: 40 hex digits derived from the id with the same key
// (under another label). It is not a credential of any API: it only lets requests through
// to the sandbox's ports (PublicTraffic).
func (s *Server) trafficToken(id string) string {
	m := hmac.New(sha256.New, s.tokenKey)
	m.Write([]byte("e2b traffic access token\x00" + id))
	return hex.EncodeToString(m.Sum(nil))[:40]
}

// forgetEnvdTokens removes the envd tokens that servers before this one recorded as sandbox
// tokens of the native API, where they could delete, snapshot or extend their sandbox.
func (s *Server) forgetEnvdTokens(ctx context.Context) error {
	recs, err := s.st.Sandboxes(ctx)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if err := s.st.RemoveToken(ctx, store.Hash(s.envdToken(rec.ID))); err != nil {
			return err
		}
	}
	return nil
}

// tokenOK reports whether tok is an access token of sandbox id: its envd token, or any
// other live sandbox token of it in the store.
func (s *Server) tokenOK(ctx context.Context, id, tok string) bool {
	if tok == "" {
		return false
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.envdToken(id))) == 1 {
		return true
	}
	got, err := s.st.SandboxForToken(ctx, tok)
	return err == nil && subtle.ConstantTimeCompare([]byte(got), []byte(id)) == 1
}

// Signature is E2B's v1 signature of a /files URL: "v1_" + base64(sha256(path:op:user:token
// [:expiration])), unpadded. op is "read" or "write"; user is "" when the URL names none;
// expiration is unix seconds, 0 for none.
func Signature(path, op, user, token string, expiration int64) string {
	msg := path + ":" + op + ":" + user + ":" + token
	if expiration != 0 {
		msg += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(msg))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// The ways a signed /files URL fails, in envd's words (E2B's SDK tests read them).
var (
	errSignatureInvalid = errors.New("invalid signature")
	errSignatureExpired = errors.New("signature is already expired")
	// A signed URL without E2b-Sandbox-Id or a 49983-{id}.{domain} host (one made against
	// E2B_SANDBOX_URL) names no sandbox.
	errSignatureNoSandbox = errors.New("invalid signature: the URL names no sandbox; send it to the sandbox's 49983-{id}.{domain} host (tupper serve --domain) or with an E2b-Sandbox-Id header")
)

// checkSignature checks a signed /files URL against the sandbox's envd token: nil,
// errSignatureInvalid, or errSignatureExpired. As envd, it checks the signature before
// the expiration, so only a URL the sandbox's token signed is reported as expired.
func (s *Server) checkSignature(id, method string, q url.Values, now time.Time) error {
	sig := q.Get("signature")
	if sig == "" {
		return errSignatureInvalid
	}
	op := "read"
	if method == "POST" {
		op = "write"
	}
	var exp int64
	if v := q.Get("signature_expiration"); v != "" {
		var err error
		if exp, err = strconv.ParseInt(v, 10, 64); err != nil || exp <= 0 {
			return errSignatureInvalid
		}
	}
	want := Signature(q.Get("path"), op, q.Get("username"), s.envdToken(id), exp)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return errSignatureInvalid
	}
	if exp != 0 && now.Unix() > exp {
		return errSignatureExpired
	}
	return nil
}
