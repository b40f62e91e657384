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
	"sync"
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
)

// checkSignature checks a signed /files URL against the sandbox's envd token: nil,
// errSignatureInvalid, or errSignatureExpired. As envd, it checks the signature before
// the expiration, so only a URL the sandbox's token signed is reported as expired.
func (s *Server) checkSignature(id, method string, q url.Values, now time.Time) error {
	return s.checkSignatureWith(s.envdToken(id), method, q, now)
}

// checkSignatureWith is checkSignature with the sandbox's envd token.
func (s *Server) checkSignatureWith(token, method string, q url.Values, now time.Time) error {
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
	want := Signature(q.Get("path"), op, q.Get("username"), token, exp)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return errSignatureInvalid
	}
	if exp != 0 && now.Unix() > exp {
		return errSignatureExpired
	}
	return nil
}

// A signed /files URL made against E2B_SANDBOX_URL names no sandbox: E2B's SDKs put the
// sandbox in the host (49983-{id}.{domain}), and E2B_SANDBOX_URL replaces the host. The
// server then finds the sandbox whose envd token signed it, among the live sandboxes: two
// hashes per sandbox (a few milliseconds with a thousand), for anyone who asks. So that
// unauthenticated requests cannot take more than that, one such search runs at a time (the
// others wait their turn, bounded by their context), over a list of live ids read from the
// store at most once per second, or again as soon as the store has recorded a sandbox since
// (so a sandbox's URLs work the moment it is created), and each sandbox's token is derived
// once.
const signedScanListTTL = time.Second

type signedScan struct {
	turn chan struct{} // a semaphore of one

	mu       sync.Mutex
	ids      []string
	listed   time.Time
	recorded uint64            // the store's Recorded when ids were listed
	tokens   map[string]string // envd tokens by id, of the listed ids
}

func newSignedScan() *signedScan { return &signedScan{turn: make(chan struct{}, 1)} }

// signedSandbox returns the live sandbox whose envd token signed q (a /files URL), or
// errSignatureInvalid, or errSignatureExpired (signed by one, but expired).
func (s *Server) signedSandbox(ctx context.Context, method string, q url.Values, now time.Time) (string, error) {
	if q.Get("signature") == "" {
		return "", errSignatureInvalid
	}
	sc := s.scan
	select {
	case sc.turn <- struct{}{}:
		defer func() { <-sc.turn }()
	case <-ctx.Done():
		return "", ctx.Err()
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if recorded := s.st.Recorded(); sc.ids == nil || recorded != sc.recorded || now.Sub(sc.listed) > signedScanListTTL || now.Before(sc.listed) {
		recs, err := s.st.Sandboxes(ctx)
		if err != nil {
			return "", err
		}
		ids := make([]string, 0, len(recs))
		tokens := make(map[string]string, len(recs))
		for _, rec := range recs {
			ids = append(ids, rec.ID)
			if t, ok := sc.tokens[rec.ID]; ok {
				tokens[rec.ID] = t
			} else {
				tokens[rec.ID] = s.envdToken(rec.ID)
			}
		}
		sc.ids, sc.tokens, sc.listed, sc.recorded = ids, tokens, now, recorded
	}
	for _, id := range sc.ids {
		switch err := s.checkSignatureWith(sc.tokens[id], method, q, now); err {
		case nil, errSignatureExpired:
			return id, err
		}
	}
	return "", errSignatureInvalid
}
