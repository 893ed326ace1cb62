package standin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Code mode (--policy-mode code). RPent documents it as: the model writes
// Python that controls the robot through robo.<tool_name>(), each snippet
// within --code-timeout-s seconds and --code-max-calls robot calls, ended by
// robo.finish(...), with code and results saved in code_policy/ under the
// output directory. The file format of code_policy/ is not documented; the
// one here is ours (harnesses/rpent_libero/README.md, "Code as policy").
//
// How the model hands over its code is not documented either. The stand-in
// offers no tools in code mode and takes the reply's content as the snippet
// (a ```python block, or the whole text): any chat model can answer that
// without a tool parser, and it is what the toy model (harnesses/minimal)
// can answer, since it replies with content when no tools are offered and
// with a tool call named after its action word otherwise, never with a
// code argument. The snippet's result goes back as the next user message
// (there is no tool call to answer). RPent may use a tool instead; the
// outcome adapter reads code_policy/, not the transcript, so it does not
// depend on this choice.
//
// The stand-in is not a Python interpreter. A snippet is a list of simple
// statements, one a line: robo.<tool>(args) calls, `name = robo.<tool>(…)`
// or `name = <literal>` assignments, comments and blank lines. Arguments
// are string, number, True/False/None literals or variable names;
// variables persist between snippets. Anything else (loops, conditions,
// other calls) is refused as an exception. As a shorthand for the toy,
// whose reply is one action word, a snippet that is a bare word `name`
// means robo.name().

// Snippet error kinds, the values of code_policy/snippet_NNN.json's
// error_kind: the planner's own code (exception, timeout, max_calls) or a
// component that failed under a robo call (service).
const (
	CodeException = "exception"
	CodeTimeout   = "timeout"
	CodeMaxCalls  = "max_calls"
	CodeService   = "service"
)

// Snippet is code_policy/snippet_NNN.json (the code alone is also in
// snippet_NNN.py).
type Snippet struct {
	Snippet int        `json:"snippet"` // 1-based, in the order they ran
	Turn    int        `json:"turn"`    // the planner turn (model call) that wrote it
	Code    string     `json:"code"`
	Calls   []CodeCall `json:"calls"`
	// Error and ErrorKind say why the snippet stopped early; null when it
	// ran to its end (or to robo.finish).
	Error     *string `json:"error"`
	ErrorKind *string `json:"error_kind"`
	// Finished: robo.finish ran (code after it did not).
	Finished bool `json:"finished"`
	// EpisodeEnd is how the episode ended in this snippet (finish_called,
	// env_terminated, env_truncated), absent when it went on.
	EpisodeEnd string  `json:"episode_end,omitempty"`
	DurationS  float64 `json:"duration_s"`
}

// CodeCall is one robo call of a snippet: its result is what the same tool
// call returns in tool mode ({"error": …} when a service failed), null when
// the snippet's time limit cut the call short.
type CodeCall struct {
	Tool   string         `json:"tool"`
	Args   map[string]any `json:"args"`
	Result map[string]any `json:"result"`
}

func (s *Snippet) fail(kind, msg string) { s.ErrorKind, s.Error = &kind, &msg }

// CodeSystemPrompt is the planner's system message in code mode.
func CodeSystemPrompt(timeoutS float64, maxCalls int) string {
	return fmt.Sprintf("You control a Franka robot arm in a LIBERO tabletop scene by writing Python. "+
		"Reply with one code snippet in a ```python block; it runs at once and you get its results. "+
		"The robot is the object robo: robo.execute_skill(instruction) runs a short manipulation instruction with the VLA policy, "+
		"robo.detect(object) locates an object, robo.finish(success, summary) ends the task and code after it does not run. "+
		"Code can combine calls with loops and conditions; variables persist between snippets. "+
		"Each snippet may run %g seconds and make %d robo calls.", timeoutS, maxCalls)
}

// operatorTools are RPent's operator requests: separate tools outside
// Python (waiting for the operator can exceed a snippet's time limit), so
// not robo methods. The stand-in runs without an operator.
var operatorTools = map[string]bool{"request_scene_reset": true, "request_operator_verdict": true}

// roboParams are the robo methods' parameters in order; any other name is a
// manipulation primitive taking an optional instruction, as in tool mode.
var roboParams = map[string][]string{
	"execute_skill": {"instruction"},
	"detect":        {"object"},
	"finish":        {"success", "summary"},
}

// runSnippet runs the code of one model reply, writes its code_policy/
// files and gives the result back to the model. It returns the episode's
// end when the snippet ended it, and an error only when the episode itself
// must stop (its context ended, a file could not be written).
func (e *episode) runSnippet(ctx context.Context, reply Message) (string, error) {
	code := SnippetCode(reply.Content)
	if code == "" {
		e.tr.Messages = append(e.tr.Messages, Message{Role: "user", Content: "No code was given. Reply with a Python snippet that calls robo.<tool>(...)."})
		return "", nil
	}
	e.tr.Stats.CodeSnippets++
	sn := Snippet{Snippet: e.tr.Stats.CodeSnippets, Turn: e.tr.Stats.Turns, Code: code, Calls: []CodeCall{}}
	start := time.Now()
	end, err := e.runCode(ctx, &sn)
	sn.DurationS = time.Since(start).Seconds()
	if werr := e.writeSnippet(sn); werr != nil {
		return "", werr
	}
	if err != nil {
		return "", err
	}
	if sn.Error != nil {
		e.logf("snippet %d (turn %d) stopped: %s: %s", sn.Snippet, sn.Turn, *sn.ErrorKind, *sn.Error)
	}
	calls := make([]map[string]any, len(sn.Calls))
	for i, c := range sn.Calls {
		calls[i] = map[string]any{"tool": c.Tool, "result": c.Result}
	}
	e.tr.Messages = append(e.tr.Messages, Message{Role: "user", Content: "Code result: " +
		jsonText(map[string]any{"snippet": sn.Snippet, "calls": calls, "error": sn.Error, "error_kind": sn.ErrorKind})})
	return end, nil
}

// runCode runs a snippet's statements through act, the execution path of
// tool mode, within the snippet's limits. An error is the episode's context
// ending; everything the snippet did wrong is in sn.
func (e *episode) runCode(ctx context.Context, sn *Snippet) (string, error) {
	sctx, cancel := context.WithTimeout(ctx, time.Duration(e.cfg.CodeTimeoutS*float64(time.Second)))
	defer cancel()
	timedOut := func(during string) {
		sn.fail(CodeTimeout, fmt.Sprintf("TimeoutError: the snippet ran past its %gs limit (--code-timeout-s)%s", e.cfg.CodeTimeoutS, during))
	}
	stmts, err := ParseSnippet(sn.Code)
	if err != nil {
		sn.fail(CodeException, "SyntaxError: "+err.Error())
		return "", nil
	}
	for _, st := range stmts {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if sctx.Err() != nil {
			timedOut("")
			return "", nil
		}
		if st.call == "" {
			v, err := e.eval(st.value, st.line)
			if err != nil {
				sn.fail(CodeException, err.Error())
				return "", nil
			}
			e.vars[st.target] = v
			continue
		}
		if operatorTools[st.call] {
			sn.fail(CodeException, fmt.Sprintf("AttributeError: line %d: robo has no %s: operator requests are separate tools outside Python", st.line, st.call))
			return "", nil
		}
		args, err := e.bind(st)
		if err != nil {
			sn.fail(CodeException, err.Error())
			return "", nil
		}
		if len(sn.Calls) >= e.cfg.CodeMaxCalls {
			sn.fail(CodeMaxCalls, fmt.Sprintf("line %d: robo.%s would be call %d; a snippet may make %d (--code-max-calls)", st.line, st.call, len(sn.Calls)+1, e.cfg.CodeMaxCalls))
			return "", nil
		}
		e.tr.Stats.ToolCalls++
		result, end, err := e.act(sctx, st.call, args)
		call := CodeCall{Tool: st.call, Args: args, Result: result}
		if err != nil {
			sn.Calls = append(sn.Calls, call)
			switch {
			case ctx.Err() != nil:
				return "", ctx.Err()
			case sctx.Err() != nil: // the snippet's limit cut the call, not the service
				timedOut(fmt.Sprintf(" during robo.%s (line %d)", st.call, st.line))
				return "", nil
			}
			e.serviceError(err) // counted and logged as in tool mode
			sn.Calls[len(sn.Calls)-1].Result = map[string]any{"error": err.Error()}
			sn.fail(CodeService, fmt.Sprintf("line %d: robo.%s: %v", st.line, st.call, err))
			return "", nil
		}
		sn.Calls = append(sn.Calls, call)
		if st.target != "" {
			e.vars[st.target] = result
		}
		if end != "" {
			sn.Finished, sn.EpisodeEnd = end == "finish_called", end
			return end, nil
		}
	}
	return "", nil
}

// bind maps a call's arguments onto the robo method's parameters, as
// Python would, or fails with the TypeError Python would raise.
func (e *episode) bind(st statement) (map[string]any, error) {
	params, ok := roboParams[st.call]
	if !ok {
		params = []string{"instruction"}
	}
	if len(st.args) > len(params) {
		return nil, fmt.Errorf("TypeError: line %d: robo.%s() takes %d positional argument(s) but %d were given", st.line, st.call, len(params), len(st.args))
	}
	args := map[string]any{}
	for i, a := range st.args {
		v, err := e.eval(a, st.line)
		if err != nil {
			return nil, err
		}
		args[params[i]] = v
	}
	for _, kw := range st.kwargs {
		if !slices.Contains(params, kw.name) {
			return nil, fmt.Errorf("TypeError: line %d: robo.%s() got an unexpected keyword argument %q", st.line, st.call, kw.name)
		}
		if _, dup := args[kw.name]; dup {
			return nil, fmt.Errorf("TypeError: line %d: robo.%s() got multiple values for argument %q", st.line, st.call, kw.name)
		}
		v, err := e.eval(kw.value, st.line)
		if err != nil {
			return nil, err
		}
		args[kw.name] = v
	}
	return args, nil
}

func (e *episode) eval(x expr, line int) (any, error) {
	if x.name == "" {
		return x.lit, nil
	}
	v, ok := e.vars[x.name]
	if !ok {
		return nil, fmt.Errorf("NameError: line %d: name %q is not defined", line, x.name)
	}
	return v, nil
}

// writeSnippet writes code_policy/snippet_NNN.py and .json.
func (e *episode) writeSnippet(sn Snippet) error {
	dir := filepath.Join(e.cfg.OutputDir, "code_policy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("code_policy: %w", err)
	}
	base := filepath.Join(dir, fmt.Sprintf("snippet_%03d", sn.Snippet))
	if err := os.WriteFile(base+".py", []byte(sn.Code+"\n"), 0o644); err != nil {
		return fmt.Errorf("write snippet code: %w", err)
	}
	b, err := json.MarshalIndent(sn, "", "  ")
	if err != nil {
		return fmt.Errorf("encode snippet %d: %w", sn.Snippet, err)
	}
	if err := os.WriteFile(base+".json", append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write snippet record: %w", err)
	}
	return nil
}

// SnippetCode is the code of a reply's content: its first fenced block
// (```python … ```) when it has one, else the whole text.
func SnippetCode(content any) string {
	var text string
	switch c := content.(type) {
	case string:
		text = c
	case []any: // content parts: their text
		var b strings.Builder
		for _, p := range c {
			if m, ok := p.(map[string]any); ok && m["type"] == "text" {
				s, _ := m["text"].(string)
				b.WriteString(s)
			}
		}
		text = b.String()
	}
	if _, rest, ok := strings.Cut(text, "```"); ok {
		if first, after, ok := strings.Cut(rest, "\n"); ok && infoString.MatchString(first) {
			rest = after // ```python
		}
		rest, _, _ = strings.Cut(rest, "```")
		text = rest
	}
	return strings.TrimSpace(text)
}

var (
	infoString = regexp.MustCompile(`^\s*[A-Za-z0-9_+-]*\s*$`)
	identRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)
	numberRe   = regexp.MustCompile(`^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?`)
	bareWord   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// statement is one line of a snippet: a robo call (call set), optionally
// assigned to target, or target = value.
type statement struct {
	line   int
	target string
	call   string
	args   []expr
	kwargs []kwarg
	value  expr
}

// expr is a literal or a variable's name.
type expr struct {
	lit  any
	name string
}

type kwarg struct {
	name  string
	value expr
}

// ParseSnippet parses the statements the stand-in runs (see the top of
// this file); a bare word is robo.<word>().
func ParseSnippet(code string) ([]statement, error) {
	if w := strings.TrimSpace(code); bareWord.MatchString(w) {
		return []statement{{line: 1, call: w}}, nil
	}
	var out []statement
	for i, text := range strings.Split(code, "\n") {
		p := &lineParser{s: text, line: i + 1}
		if p.done() {
			continue // blank or comment
		}
		st, err := p.statement()
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	if len(out) == 0 {
		return nil, errors.New("the snippet has no statement")
	}
	return out, nil
}

type lineParser struct {
	s    string
	i    int
	line int
}

func (p *lineParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\r') {
		p.i++
	}
}

// done says whether only blanks and a comment are left.
func (p *lineParser) done() bool {
	p.space()
	return p.i == len(p.s) || p.s[p.i] == '#'
}

func (p *lineParser) eat(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *lineParser) ident() string {
	p.space()
	m := identRe.FindString(p.s[p.i:])
	p.i += len(m)
	return m
}

func (p *lineParser) unsupported() error {
	return fmt.Errorf("line %d: %q: the stand-in runs only robo.<tool>(...) calls, assignments of them or of literals, and comments",
		p.line, strings.TrimSpace(p.s))
}

func (p *lineParser) statement() (statement, error) {
	st := statement{line: p.line}
	name := p.ident()
	if name == "" {
		return st, p.unsupported()
	}
	if save := p.i; p.eat('=') && !p.eat('=') {
		st.target = name
		p.space()
		if save := p.i; p.ident() == "robo" && p.eat('.') {
			name = "robo"
			p.i--
		} else {
			p.i = save
			v, err := p.expr()
			if err != nil {
				return st, err
			}
			st.value = v
			if !p.done() {
				return st, p.unsupported()
			}
			return st, nil
		}
	} else {
		p.i = save
	}
	if name != "robo" || !p.eat('.') {
		return st, p.unsupported()
	}
	if st.call = p.ident(); st.call == "" || !p.eat('(') {
		return st, p.unsupported()
	}
	for !p.eat(')') {
		save := p.i
		if kw := p.ident(); kw != "" && p.eat('=') && !p.eat('=') {
			v, err := p.expr()
			if err != nil {
				return st, err
			}
			st.kwargs = append(st.kwargs, kwarg{kw, v})
		} else {
			p.i = save
			if len(st.kwargs) > 0 {
				return st, fmt.Errorf("line %d: positional argument follows keyword argument", p.line)
			}
			v, err := p.expr()
			if err != nil {
				return st, err
			}
			st.args = append(st.args, v)
		}
		if !p.eat(',') {
			if !p.eat(')') {
				return st, p.unsupported()
			}
			break
		}
	}
	if !p.done() {
		return st, p.unsupported()
	}
	return st, nil
}

// expr reads a literal (string, number, True, False, None) or a name.
func (p *lineParser) expr() (expr, error) {
	p.space()
	if p.i >= len(p.s) {
		return expr{}, p.unsupported()
	}
	switch q := p.s[p.i]; {
	case q == '"' || q == '\'':
		j := p.i + 1
		for j < len(p.s) && p.s[j] != q {
			if p.s[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(p.s) {
			return expr{}, fmt.Errorf("line %d: unterminated string", p.line)
		}
		body := p.s[p.i+1 : j]
		if q == '\'' { // as a double-quoted Go string: \' means ', " needs escaping
			body = strings.ReplaceAll(strings.ReplaceAll(body, `\'`, `'`), `"`, `\"`)
		}
		s, err := strconv.Unquote(`"` + body + `"`)
		if err != nil {
			return expr{}, fmt.Errorf("line %d: string %s: %w", p.line, p.s[p.i:j+1], err)
		}
		p.i = j + 1
		return expr{lit: s}, nil
	case numberRe.MatchString(p.s[p.i:]):
		m := numberRe.FindString(p.s[p.i:])
		p.i += len(m)
		if n, err := strconv.Atoi(m); err == nil {
			return expr{lit: n}, nil
		}
		f, err := strconv.ParseFloat(m, 64)
		if err != nil {
			return expr{}, fmt.Errorf("line %d: number %s: %w", p.line, m, err)
		}
		return expr{lit: f}, nil
	}
	switch name := p.ident(); name {
	case "":
		return expr{}, p.unsupported()
	case "True":
		return expr{lit: true}, nil
	case "False":
		return expr{lit: false}, nil
	case "None":
		return expr{lit: nil}, nil
	default:
		return expr{name: name}, nil
	}
}
