package tools

import "encoding/json"

// OpenAI returns the tools as OpenAI function-calling definitions, ready to send as the
// "tools" of a chat completion request:
//
//	[{"type":"function","function":{"name":…,"description":…,"parameters":{…}}}, …]
//
// Run the model's tool calls with Call, passing function.arguments as args.
func OpenAI() json.RawMessage {
	type function struct {
		Name        string  `json:"name"`
		Description string  `json:"description"`
		Parameters  *Schema `json:"parameters"`
	}
	type tool struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	out := make([]tool, 0, len(allTools()))
	for _, t := range allTools() {
		out = append(out, tool{Type: "function", Function: function{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}})
	}
	return mustMarshal(out)
}

// Anthropic returns the tools as Anthropic tool-use definitions, ready to send as the
// "tools" of a Messages API request:
//
//	[{"name":…,"description":…,"input_schema":{…}}, …]
//
// Run the model's tool_use blocks with Call, passing input as args.
func Anthropic() json.RawMessage {
	type tool struct {
		Name        string  `json:"name"`
		Description string  `json:"description"`
		InputSchema *Schema `json:"input_schema"`
	}
	out := make([]tool, 0, len(allTools()))
	for _, t := range allTools() {
		out = append(out, tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return mustMarshal(out)
}

// Definitions returns the tools as neutral JSON, with their annotations:
//
//	[{"name":…,"description":…,"input_schema":{…},"read_only":…,"destructive":…}, …]
func Definitions() json.RawMessage {
	type tool struct {
		Name        string  `json:"name"`
		Description string  `json:"description"`
		InputSchema *Schema `json:"input_schema"`
		ReadOnly    bool    `json:"read_only"`
		Destructive bool    `json:"destructive"`
	}
	out := make([]tool, 0, len(allTools()))
	for _, t := range allTools() {
		out = append(out, tool{t.Name, t.Description, t.InputSchema, t.ReadOnly, t.Destructive})
	}
	return mustMarshal(out)
}

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("tools: " + err.Error()) // the definitions are static; a failure is a bug
	}
	return b
}
