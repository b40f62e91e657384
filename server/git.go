package server

import (
	"net/http"

	"github.com/tupper-dev/tupper/sandbox"
)

// gitRequest is the body of every git route; each uses the fields it needs. Tokens go to a
// credential helper inside the sandbox, never into argv, history or output.
type gitRequest struct {
	URL     string `json:"url,omitempty"`     // clone
	Dir     string `json:"dir,omitempty"`     // the repository; "" is /workspace/app
	Branch  string `json:"branch,omitempty"`  // clone, push, checkout
	Depth   int    `json:"depth,omitempty"`   // clone
	Token   string `json:"token,omitempty"`   // clone, push
	Message string `json:"message,omitempty"` // commit
	All     bool   `json:"all,omitempty"`     // commit
	Author  string `json:"author,omitempty"`  // commit
	Remote  string `json:"remote,omitempty"`  // push
	Create  bool   `json:"create,omitempty"`  // checkout
}

func (s *Server) git(w http.ResponseWriter, r *http.Request, fn func(g *sandbox.Git, req gitRequest) (*sandbox.RunResult, error)) {
	var req gitRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		res, err := fn(b.Git, req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, resultJSON(res))
		return nil
	})
}

func (s *Server) gitClone(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.git(w, r, func(g *sandbox.Git, q gitRequest) (*sandbox.RunResult, error) {
		return g.Clone(r.Context(), q.URL, sandbox.CloneOptions{Dir: q.Dir, Branch: q.Branch, Depth: q.Depth, Token: q.Token})
	})
}

func (s *Server) gitStatus(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.git(w, r, func(g *sandbox.Git, q gitRequest) (*sandbox.RunResult, error) { return g.Status(r.Context(), q.Dir) })
}

func (s *Server) gitDiff(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.git(w, r, func(g *sandbox.Git, q gitRequest) (*sandbox.RunResult, error) { return g.Diff(r.Context(), q.Dir) })
}

func (s *Server) gitCommit(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.git(w, r, func(g *sandbox.Git, q gitRequest) (*sandbox.RunResult, error) {
		return g.Commit(r.Context(), q.Dir, sandbox.CommitOptions{Message: q.Message, All: q.All, Author: q.Author})
	})
}

func (s *Server) gitPush(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.git(w, r, func(g *sandbox.Git, q gitRequest) (*sandbox.RunResult, error) {
		return g.Push(r.Context(), q.Dir, sandbox.PushOptions{Token: q.Token, Remote: q.Remote, Branch: q.Branch})
	})
}

func (s *Server) gitCheckout(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.git(w, r, func(g *sandbox.Git, q gitRequest) (*sandbox.RunResult, error) {
		return g.Checkout(r.Context(), q.Dir, sandbox.CheckoutOptions{Branch: q.Branch, Create: q.Create})
	})
}
