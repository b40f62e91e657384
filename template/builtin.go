package template

// Builtin is a template the store makes on first use rather than holding from the start:
// a provider lists it before it is made, and a create that names it makes it.
type Builtin struct {
	Name  string
	About string // what it is, as a template's Source
	Takes string // how long making it takes, said before a create that makes it
}

// Builtins are the store's built-in templates, in the order they are listed.
var Builtins = []Builtin{
	{Name: Debian, About: "built in: made on first use from this machine's apt mirror", Takes: "a minute or two"},
	{Name: Base, About: "built in: debian with Python, Node.js, git, curl and sudo (E2B's base), built on first use", Takes: "a few minutes: debian, then Python, Node.js, git, curl and sudo"},
}

// BuiltinNamed returns the built-in template called name.
func BuiltinNamed(name string) (Builtin, bool) {
	for _, b := range Builtins {
		if b.Name == name {
			return b, true
		}
	}
	return Builtin{}, false
}
