package harness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Problem is one thing wrong with a harness file, at a line when known.
type Problem struct {
	Line int    // 1-based; 0 when the problem has no single place
	Path string // e.g. services.0.ready
	Msg  string
}

func (p Problem) String() string {
	where := ""
	if p.Path != "" {
		where = p.Path + ": "
	}
	return where + p.Msg
}

var compiled *jsonschema.Schema

func harnessSchema() (*jsonschema.Schema, error) {
	if compiled != nil {
		return compiled, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.HarnessSchema))
	if err != nil {
		return nil, fmt.Errorf("harness schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("harness.schema.json", doc); err != nil {
		return nil, fmt.Errorf("harness schema: %w", err)
	}
	s, err := c.Compile("harness.schema.json")
	if err != nil {
		return nil, fmt.Errorf("harness schema: %w", err)
	}
	compiled = s
	return s, nil
}

// Validate checks a harness file against schemas/harness.schema.json and
// then the rules Load enforces (vars, placeholders, disjoint splits), and
// returns every problem with the line it is on.
func Validate(path string, overrides map[string]string) ([]Problem, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("harness file %s: %w", path, err)
	}
	// A variant (base:) is checked as its merged document; lines then
	// belong to no one file, so problems carry none.
	merged, _, _, err := read(path, 0)
	if err != nil {
		return []Problem{{Msg: err.Error()}}, nil
	}
	lines := string(merged) == string(raw)
	raw = merged
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return []Problem{{Msg: strings.Join(te.Errors, "; ")}}, nil
		}
		return []Problem{{Line: yamlErrLine(err), Msg: err.Error()}}, nil
	}
	var doc any
	if err := root.Decode(&doc); err != nil {
		return []Problem{{Msg: err.Error()}}, nil
	}
	// Round-trip through JSON so the validator sees JSON types.
	b, err := json.Marshal(doc)
	if err != nil {
		return []Problem{{Msg: fmt.Sprintf("not representable as JSON: %v", err)}}, nil
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("harness file %s: %w", path, err)
	}
	sch, err := harnessSchema()
	if err != nil {
		return nil, err
	}
	var out []Problem
	if err := sch.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, fmt.Errorf("validate %s: %w", path, err)
		}
		for _, leaf := range leaves(ve) {
			p := Problem{Path: strings.Join(leaf.InstanceLocation, "."), Msg: leafMessage(leaf)}
			if lines {
				p.Line = lineOf(&root, leaf.InstanceLocation)
			}
			out = append(out, p)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Line < out[j].Line })
		return out, nil
	}
	if _, err := Load(path, overrides); err != nil {
		p := Problem{Msg: err.Error()}
		var fe *FieldError
		if errors.As(err, &fe) {
			p.Path, p.Msg = fe.Path, fe.Err.Error()
			if lines {
				p.Line = lineOf(&root, strings.Split(fe.Path, "."))
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// FieldError is a rule broken at a place in the file (dotted path).
type FieldError struct {
	Path string
	Err  error
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func leaves(ve *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return []*jsonschema.ValidationError{ve}
	}
	var out []*jsonschema.ValidationError
	for _, c := range ve.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

func leafMessage(ve *jsonschema.ValidationError) string {
	// The library prints "at '/a/b': message"; keep the message.
	msg := ve.Error()
	if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, "at '") {
		msg = msg[i+2:]
	}
	return msg
}

// lineOf finds the line of the node at a path (keys and list indexes) in a
// YAML document; for a missing key it returns the line of its parent.
func lineOf(doc *yaml.Node, path []string) int {
	n := doc
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, part := range path {
		next := (*yaml.Node)(nil)
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == part {
					line = n.Content[i].Line
					next = n.Content[i+1]
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(part); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

func yamlErrLine(err error) int {
	// yaml.v3 syntax errors read "yaml: line N: ...".
	var n int
	if _, e := fmt.Sscanf(strings.TrimPrefix(err.Error(), "yaml: "), "line %d:", &n); e == nil {
		return n
	}
	return 0
}
