package e2b

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// router routes the control plane by E2B's own path patterns ("GET
// /sandboxes/{sandboxID}"). Where two patterns match a path, the one with a literal segment
// where the other has a parameter, at the first segment where they differ, wins:
// "/templates/aliases/{alias}" before "/templates/{templateID}/tags", "/templates/tags"
// before "/templates/{templateID}". (net/http.ServeMux refuses to register the first
// pair, since neither matches a subset of the other's paths.) A path no pattern matches
// answers 404, a method no pattern of the path has answers 405, both with E2B's error body.
type router struct {
	routes []route
	areas  map[string]bool // the first segment of every route, and the second after v2, v3…
}

type route struct {
	method, pattern string
	segs            []string // "{name}" for a parameter
	fn              http.HandlerFunc
}

func isParam(seg string) bool { return strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") }

// handle adds a route; pattern is "METHOD /path".
func (rt *router) handle(pattern string, fn http.HandlerFunc) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok || !strings.HasPrefix(path, "/") {
		panic("e2b: bad route pattern " + pattern)
	}
	segs := strings.Split(path[1:], "/")
	for _, r := range rt.routes {
		if r.method == method && slices.Equal(r.segs, segs) {
			panic("e2b: route " + pattern + " registered twice")
		}
	}
	rt.routes = append(rt.routes, route{method: method, pattern: pattern, segs: segs, fn: fn})
	if rt.areas == nil {
		rt.areas = map[string]bool{}
	}
	rt.areas[area(segs)] = true
}

// area is the part of a path that names an area of E2B's API: "/templates" of
// "/templates/{templateID}", "/v2/templates" of "/v2/templates/{templateID}".
func area(segs []string) string {
	a := "/" + segs[0]
	if v := segs[0]; len(segs) > 1 && len(v) > 1 && v[0] == 'v' && strings.Trim(v[1:], "0123456789") == "" {
		a += "/" + segs[1]
	}
	return a
}

// covers reports whether path is in an area of a route: E2B's API answers it, if only
// with an error.
func (rt *router) covers(path string) bool {
	if !strings.HasPrefix(path, "/") {
		return false
	}
	return rt.areas[area(strings.Split(path[1:], "/"))]
}

// match returns the best route of method for the escaped path and its parameters or, when
// there is none, the methods of the routes that match the path.
func (rt *router) match(method, escapedPath string) (best *route, params map[string]string, allow []string) {
	if !strings.HasPrefix(escapedPath, "/") {
		return nil, nil, nil
	}
	raw := strings.Split(escapedPath[1:], "/")
	segs := make([]string, len(raw))
	for i, s := range raw {
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, nil, nil
		}
		segs[i] = u
	}
	for i := range rt.routes {
		r := &rt.routes[i]
		if !r.matches(segs) {
			continue
		}
		if r.method != method {
			if !slices.Contains(allow, r.method) {
				allow = append(allow, r.method)
			}
			continue
		}
		if best == nil || r.moreSpecific(best) {
			best = r
		}
	}
	if best == nil {
		return nil, nil, allow
	}
	params = map[string]string{}
	for i, s := range best.segs {
		if isParam(s) {
			params[s[1:len(s)-1]] = segs[i]
		}
	}
	return best, params, nil
}

func (r *route) matches(segs []string) bool {
	if len(segs) != len(r.segs) {
		return false
	}
	for i, s := range r.segs {
		if isParam(s) {
			if segs[i] == "" {
				return false
			}
		} else if s != segs[i] {
			return false
		}
	}
	return true
}

// moreSpecific reports whether r has a literal segment where o has a parameter, at the
// first segment where they differ.
func (r *route) moreSpecific(o *route) bool {
	for i := range r.segs {
		if a, b := isParam(r.segs[i]), isParam(o.segs[i]); a != b {
			return b
		}
	}
	return false
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	best, params, allow := rt.match(r.Method, r.URL.EscapedPath())
	switch {
	case best != nil:
		for k, v := range params {
			r.SetPathValue(k, v)
		}
		r.Pattern = best.pattern
		best.fn(w, r)
	case len(allow) > 0:
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeJSON(w, http.StatusMethodNotAllowed, apiError{Code: http.StatusMethodNotAllowed, Message: "method " + r.Method + " is not allowed on " + r.URL.Path})
	default:
		writeJSON(w, http.StatusNotFound, apiError{Code: http.StatusNotFound, Message: "no route " + r.Method + " " + r.URL.Path})
	}
}
