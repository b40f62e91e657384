package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// Schema is the subset of JSON Schema (draft 2020-12) the tools use for their input. It
// marshals to plain JSON Schema, so the same value serves MCP, OpenAI and Anthropic, and
// Validate checks arguments against it before any handler runs.
type Schema struct {
	Type        string             // "object", "string", "integer" or "boolean"
	Description string             // written for a model: what the value means and its default
	Properties  map[string]*Schema // for objects
	Required    []string           // for objects
	// Values, for an object, is the schema of every property value of a free-form map (such
	// as environment variables). When nil, an object admits only its Properties
	// (additionalProperties false).
	Values    *Schema
	Enum      []string // for strings
	MinLength *int     // for strings
	Pattern   string   // for strings, an RE2 regular expression
	Minimum   *int64   // for integers
	Maximum   *int64   // for integers

	re *regexp.Regexp // Pattern, compiled
}

// MarshalJSON writes s as JSON Schema, with additionalProperties false on every closed object.
func (s *Schema) MarshalJSON() ([]byte, error) {
	type wire struct {
		Type                 string          `json:"type,omitempty"`
		Description          string          `json:"description,omitempty"`
		Properties           any             `json:"properties,omitempty"` // {} is kept
		Required             []string        `json:"required,omitempty"`
		AdditionalProperties json.RawMessage `json:"additionalProperties,omitempty"`
		Enum                 []string        `json:"enum,omitempty"`
		MinLength            *int            `json:"minLength,omitempty"`
		Pattern              string          `json:"pattern,omitempty"`
		Minimum              *int64          `json:"minimum,omitempty"`
		Maximum              *int64          `json:"maximum,omitempty"`
	}
	w := wire{
		Type: s.Type, Description: s.Description, Required: s.Required, Enum: s.Enum,
		MinLength: s.MinLength, Pattern: s.Pattern, Minimum: s.Minimum, Maximum: s.Maximum,
	}
	if s.Type == "object" {
		switch {
		case s.Properties != nil:
			w.Properties = s.Properties
		case s.Values == nil:
			w.Properties = map[string]*Schema{} // some clients insist on "properties"
		}
		if s.Values != nil {
			v, err := json.Marshal(s.Values)
			if err != nil {
				return nil, err
			}
			w.AdditionalProperties = v
		} else {
			w.AdditionalProperties = json.RawMessage("false")
		}
	}
	return json.Marshal(w)
}

// ArgumentError is a call whose arguments do not match the tool's input schema. It is a
// protocol error (MCP: invalid params), not a tool result: the caller, not the sandbox, is
// at fault.
type ArgumentError struct {
	Tool    string
	Message string
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("invalid arguments for tool %s: %s", e.Tool, e.Message)
}

// Validate checks raw arguments (a JSON object; empty means {}) against s and returns them
// normalized: optional properties given as null are dropped, since many models send null for
// "not given". A mismatch is an *ArgumentError naming the first offending property.
func (s *Schema) Validate(tool string, raw json.RawMessage) (json.RawMessage, error) {
	bad := func(format string, args ...any) error {
		return &ArgumentError{Tool: tool, Message: fmt.Sprintf(format, args...)}
	}
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, bad("not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, bad("trailing data after the arguments object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, bad("arguments must be a JSON object")
	}
	for k, val := range obj {
		if val == nil && !slices.Contains(s.Required, k) {
			delete(obj, k)
		}
	}
	if err := s.check("", obj); err != "" {
		return nil, bad("%s", err)
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, bad("%v", err)
	}
	return out, nil
}

// check returns a readable description of the first mismatch of v against s, or "".
func (s *Schema) check(at string, v any) string {
	name := "arguments"
	if at != "" {
		name = fmt.Sprintf("%q", at)
	}
	switch s.Type {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return name + " must be an object"
		}
		for _, r := range s.Required {
			if _, ok := obj[r]; !ok {
				return fmt.Sprintf("%q is required", join(at, r))
			}
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ps := s.Properties[k]
			if ps == nil {
				ps = s.Values
			}
			if ps == nil {
				known := make([]string, 0, len(s.Properties))
				for p := range s.Properties {
					known = append(known, p)
				}
				slices.Sort(known)
				return fmt.Sprintf("unknown property %q (known: %s)", join(at, k), strings.Join(known, ", "))
			}
			if msg := ps.check(join(at, k), obj[k]); msg != "" {
				return msg
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return name + " must be a string"
		}
		if s.MinLength != nil && utf8.RuneCountInString(str) < *s.MinLength {
			return fmt.Sprintf("%s must not be empty", name)
		}
		if len(s.Enum) > 0 && !slices.Contains(s.Enum, str) {
			return fmt.Sprintf("%s must be one of %s", name, strings.Join(s.Enum, ", "))
		}
		if s.Pattern != "" {
			re := s.re
			if re == nil {
				var err error
				if re, err = regexp.Compile(s.Pattern); err != nil {
					return fmt.Sprintf("%s: the schema's pattern does not compile", name)
				}
			}
			if !re.MatchString(str) {
				return fmt.Sprintf("%s must match %s", name, s.Pattern)
			}
		}
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return name + " must be an integer"
		}
		i, err := n.Int64()
		if err != nil {
			return name + " must be an integer"
		}
		if s.Minimum != nil && i < *s.Minimum {
			return fmt.Sprintf("%s must be at least %d", name, *s.Minimum)
		}
		if s.Maximum != nil && i > *s.Maximum {
			return fmt.Sprintf("%s must be at most %d", name, *s.Maximum)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return name + " must be true or false"
		}
	}
	return ""
}

func join(at, k string) string {
	if at == "" {
		return k
	}
	return at + "." + k
}

// schemaFor derives the input schema of a tool from its argument struct A, so that a tool's
// arguments are declared once. jsonschema.For reads the Go types, the json names (a field
// without omitempty is required) and the descriptions (the jsonschema tag); tags named after
// the JSON Schema keywords add the constraints it has no tag for:
//
//	minLength:"1"  minimum:"1"  maximum:"65535"  enum:"all,none"  pattern:"^[a-z]+$"
//
// It panics on a struct it cannot describe: the definitions are static, so that is a bug.
func schemaFor[A any]() *Schema {
	js, err := jsonschema.For[A](nil)
	if err != nil {
		panic("tools: " + err.Error())
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[A]()) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous || name == "" || name == "-" {
			continue
		}
		if err := constrain(js.Properties[name], f.Tag); err != nil {
			panic(fmt.Sprintf("tools: %T.%s: %v", *new(A), f.Name, err))
		}
	}
	return fromJSONSchema(js)
}

// constrain sets the constraint keywords of p from tag.
func constrain(p *jsonschema.Schema, tag reflect.StructTag) error {
	if v, ok := tag.Lookup("minLength"); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		p.MinLength = &n
	}
	for key, dst := range map[string]**float64{"minimum": &p.Minimum, "maximum": &p.Maximum} {
		if v, ok := tag.Lookup(key); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return err
			}
			f := float64(n)
			*dst = &f
		}
	}
	if v, ok := tag.Lookup("enum"); ok {
		for _, e := range strings.Split(v, ",") {
			p.Enum = append(p.Enum, e)
		}
	}
	if v, ok := tag.Lookup("pattern"); ok {
		if _, err := regexp.Compile(v); err != nil {
			return err
		}
		p.Pattern = v
	}
	return nil
}

// fromJSONSchema converts what schemaFor built into the Schema the tools marshal and
// validate with. A pointer field's ["null", T] is T: Validate drops null optional arguments.
func fromJSONSchema(js *jsonschema.Schema) *Schema {
	s := &Schema{Type: js.Type, Description: js.Description, Required: js.Required, MinLength: js.MinLength, Pattern: js.Pattern}
	for _, t := range js.Types {
		if t != "null" {
			s.Type = t
		}
	}
	for _, e := range js.Enum {
		s.Enum = append(s.Enum, e.(string))
	}
	if js.Minimum != nil {
		n := int64(*js.Minimum)
		s.Minimum = &n
	}
	if js.Maximum != nil {
		n := int64(*js.Maximum)
		s.Maximum = &n
	}
	if s.Pattern != "" {
		s.re = regexp.MustCompile(s.Pattern)
	}
	if s.Type == "object" {
		s.Properties = map[string]*Schema{}
		for k, p := range js.Properties {
			s.Properties[k] = fromJSONSchema(p)
		}
		if a := js.AdditionalProperties; a != nil && a.Not == nil {
			s.Values = fromJSONSchema(a)
			if len(js.Properties) == 0 {
				s.Properties = nil
			}
		}
	}
	return s
}
