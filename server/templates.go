package server

import (
	"net/http"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// templateJSON is provider.TemplateInfo on the wire.
type templateJSON struct {
	Name    string     `json:"name"`
	Tags    []string   `json:"tags,omitempty"`
	Builtin bool       `json:"builtin"`
	Source  string     `json:"source,omitempty"`
	Layers  int        `json:"layers"`
	Size    int64      `json:"sizeBytes"`
	Created *time.Time `json:"createdAt,omitempty"`
}

func toTemplateJSON(t provider.TemplateInfo) templateJSON {
	out := templateJSON{Name: t.Name, Tags: t.Tags, Builtin: t.Builtin, Source: t.Source, Layers: t.Layers, Size: t.Size}
	if !t.Created.IsZero() {
		c := t.Created.UTC()
		out.Created = &c
	}
	return out
}

// templates are the provider's (provider.Templater), shared by every key of the server:
// what a create's template names. Without the interface there are none to list.
func (s *Server) templates(r *http.Request) ([]provider.TemplateInfo, error) {
	tp, ok := s.prov.(provider.Templater)
	if !ok {
		return nil, nil
	}
	return tp.Templates(r.Context())
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, _ *caller) {
	all, err := s.templates(r)
	if err != nil {
		writeError(w, err)
		return
	}
	out := []templateJSON{}
	for _, t := range all {
		out = append(out, toTemplateJSON(t))
	}
	writeJSON(w, http.StatusOK, map[string]any{"templates": out})
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request, _ *caller) {
	all, err := s.templates(r)
	if err != nil {
		writeError(w, err)
		return
	}
	name := r.PathValue("name")
	for _, t := range all {
		if t.Name == name {
			writeJSON(w, http.StatusOK, toTemplateJSON(t))
			return
		}
		for _, tag := range t.Tags {
			if tag == name {
				writeJSON(w, http.StatusOK, toTemplateJSON(t))
				return
			}
		}
	}
	writeError(w, provider.Errorf(provider.CodeNotFound, "template %q not found", name))
}

// deleteTemplate removes a template and the layers no other template uses; one that a
// sandbox or snapshot uses only with ?force=true.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request, _ *caller) {
	tp, ok := s.prov.(provider.Templater)
	if !ok {
		writeError(w, provider.Errorf(provider.CodeUnsupported, "the %s provider does not manage templates", s.prov.Name()))
		return
	}
	force := false
	switch r.URL.Query().Get("force") {
	case "", "false":
	case "true":
		force = true
	default:
		writeError(w, badRequest("force: true or false"))
		return
	}
	if err := tp.DeleteTemplate(r.Context(), r.PathValue("name"), force); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
