package server

import (
	"net/http"

	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
)

// git decodes the body of a git route and answers with the result of fn, which runs git.
func (s *Server) git(w http.ResponseWriter, r *http.Request, fn func(g *sandbox.Git, req api.GitRequest) (*sandbox.RunResult, error)) {
	var req api.GitRequest
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
	s.git(w, r, func(g *sandbox.Git, q api.GitRequest) (*sandbox.RunResult, error) {
		return g.Clone(r.Context(), q.URL, sandbox.CloneOptions{Dir: q.Dir, Branch: q.Branch, Depth: q.Depth, Token: q.Token})
	})
}

func (s *Server) gitStatus(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.git(w, r, func(g *sandbox.Git, q api.GitRequest) (*sandbox.RunResult, error) {
		return g.Status(r.Context(), q.Dir)
	})
}

func (s *Server) gitDiff(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.git(w, r, func(g *sandbox.Git, q api.GitRequest) (*sandbox.RunResult, error) { return g.Diff(r.Context(), q.Dir) })
}

func (s *Server) gitCommit(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.git(w, r, func(g *sandbox.Git, q api.GitRequest) (*sandbox.RunResult, error) {
		return g.Commit(r.Context(), q.Dir, sandbox.CommitOptions{Message: q.Message, All: q.All, Author: q.Author})
	})
}

func (s *Server) gitPush(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.git(w, r, func(g *sandbox.Git, q api.GitRequest) (*sandbox.RunResult, error) {
		return g.Push(r.Context(), q.Dir, sandbox.PushOptions{Token: q.Token, Remote: q.Remote, Branch: q.Branch})
	})
}

func (s *Server) gitCheckout(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.git(w, r, func(g *sandbox.Git, q api.GitRequest) (*sandbox.RunResult, error) {
		return g.Checkout(r.Context(), q.Dir, sandbox.CheckoutOptions{Branch: q.Branch, Create: q.Create})
	})
}
