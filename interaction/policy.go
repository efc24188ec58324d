package interaction

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/tool"
)

// Action is what a policy does with a tool call.
type Action string

// The actions. The zero Action is ActionAllow, as in pi, which runs every
// tool without asking.
const (
	ActionAllow Action = "allow"
	ActionAsk   Action = "ask"
	ActionDeny  Action = "deny"
)

// UnmarshalText rejects unknown actions, so a typo in a configuration file
// ("alow") fails at load time instead of silently allowing.
func (a *Action) UnmarshalText(text []byte) error {
	switch v := Action(text); v {
	case ActionAllow, ActionAsk, ActionDeny:
		*a = v
		return nil
	}
	return fmt.Errorf("unknown action %q (want allow, ask or deny)", text)
}

func (a Action) orAllow() Action {
	if a == "" {
		return ActionAllow
	}
	return a
}

// Rule matches tool calls and says what to do with them.
//
// Tool is a glob against the tool's name; empty means every tool.
//
// Match is a glob against one argument of the call; empty matches every
// call of the tool. The argument is Arg when set, a path into the
// arguments written "args.field" or "args.field.sub" (a numeric segment
// indexes an array). Without Arg it is the tool's key argument: command
// for bash; path for read, write, edit, ls, find and grep. Path arguments
// are cleaned (filepath.Clean) before matching, so "src/../.env" matches
// ".env"; they are otherwise matched as the model wrote them, relative or
// absolute. A string argument is matched as is, a number or boolean as its
// JSON text. When the argument is missing, is an object or array, or the
// tool has no key argument, a rule with a Match does not match.
//
// Globs: * matches any run of characters, including "/" and spaces (so
// "git *" matches "git push origin main" and "/etc/*" everything under
// /etc); ? matches one character; [abc], [a-z] and [!a-z] match one
// character of a class; a backslash makes the next character literal.
// Matching is case-sensitive and covers the whole string.
type Rule struct {
	Tool   string `json:"tool,omitempty"`
	Arg    string `json:"arg,omitempty"`
	Match  string `json:"match,omitempty"`
	Action Action `json:"action"`
	// Reason is told to the model when the rule denies a call.
	Reason string `json:"reason,omitempty"`
}

// Policy decides per tool call whether to allow it, ask a person, or deny
// it. Rules are tried in order and the first that matches decides; when
// none does, Default decides (allow when empty). The policy is a way to
// keep a person in the loop, not a sandbox: a bash command can reach any
// file whatever path rules say.
type Policy struct {
	Rules   []Rule `json:"rules,omitempty"`
	Default Action `json:"default,omitempty"`
}

// ParsePolicy reads a policy from its JSON form, for example
//
//	{"default": "ask", "rules": [
//	  {"tool": "read", "action": "allow"},
//	  {"tool": "bash", "match": "git status*", "action": "allow"},
//	  {"tool": "bash", "match": "rm -rf *", "action": "deny", "reason": "never delete trees"},
//	  {"tool": "fetch", "arg": "args.url", "match": "https://internal.example/*", "action": "deny"}
//	]}
//
// Unknown keys, unknown actions and malformed globs are errors that name
// the rule.
func ParsePolicy(data []byte) (Policy, error) {
	var p Policy
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("policy: %w", err)
	}
	if dec.More() {
		return Policy{}, errors.New("policy: unexpected data after the policy object")
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Validate checks every rule: a known action, well-formed globs, a
// well-formed Arg path. Evaluate treats a malformed glob as not matching,
// so validate policies that do not come from ParsePolicy.
func (p Policy) Validate() error {
	if err := validAction(p.Default, true); err != nil {
		return fmt.Errorf("policy: default: %w", err)
	}
	for i, r := range p.Rules {
		if err := r.validate(); err != nil {
			return fmt.Errorf("policy: rules[%d]: %w", i, err)
		}
	}
	return nil
}

func validAction(a Action, emptyOK bool) error {
	if a == "" && emptyOK {
		return nil
	}
	var v Action
	return v.UnmarshalText([]byte(a))
}

func (r Rule) validate() error {
	if err := validAction(r.Action, false); err != nil {
		return fmt.Errorf("action: %w", err)
	}
	if err := validGlob(r.Tool); err != nil {
		return fmt.Errorf("tool: %w", err)
	}
	if err := validGlob(r.Match); err != nil {
		return fmt.Errorf("match: %w", err)
	}
	if r.Arg != "" {
		if _, err := argPath(r.Arg); err != nil {
			return fmt.Errorf("arg: %w", err)
		}
		if r.Match == "" {
			return errors.New("arg: needs a match to compare the argument with")
		}
	}
	return nil
}

// Evaluate returns the action for call and the rule that decided it, nil
// when the default did.
func (p Policy) Evaluate(call tool.Call) (Action, *Rule) {
	var args any
	decoded := false
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.Tool != "" && !globMatch(r.Tool, call.Name) {
			continue
		}
		if r.Match != "" {
			if !decoded {
				// Decoded once per call and only when a rule needs it:
				// most policies decide on the tool name alone.
				decoded = true
				if err := json.Unmarshal(call.Args, &args); err != nil {
					args = nil
				}
			}
			s, ok := r.argument(call.Name, args)
			if !ok || !globMatch(r.Match, s) {
				continue
			}
		}
		return r.Action.orAllow(), r
	}
	return p.Default.orAllow(), nil
}

// keyArgument names the argument a Rule without Arg matches, for each
// built-in tool: pi's tool names and parameters.
var keyArgument = map[string]string{
	"bash":  "command",
	"read":  "path",
	"write": "path",
	"edit":  "path",
	"ls":    "path",
	"find":  "path",
	"grep":  "path",
}

func (r *Rule) argument(toolName string, args any) (string, bool) {
	if r.Arg != "" {
		segs, err := argPath(r.Arg)
		if err != nil {
			return "", false
		}
		return scalar(walk(args, segs))
	}
	key, ok := keyArgument[toolName]
	if !ok {
		return "", false
	}
	obj, _ := args.(map[string]any)
	s, ok := scalar(obj[key])
	if ok && key == "path" && s != "" {
		s = filepath.Clean(s)
	}
	return s, ok
}

// KeyArgumentValue returns the text of call's key argument (the command
// of a bash call, the path of a read), for a one-line summary of the call.
func KeyArgumentValue(call tool.Call) string {
	key, ok := keyArgument[call.Name]
	if !ok {
		return ""
	}
	var obj map[string]any
	if json.Unmarshal(call.Args, &obj) != nil {
		return ""
	}
	s, _ := scalar(obj[key])
	return s
}

func argPath(p string) ([]string, error) {
	rest, ok := strings.CutPrefix(p, "args.")
	if !ok || rest == "" {
		return nil, fmt.Errorf("%q is not a path into the arguments (want args.field)", p)
	}
	segs := strings.Split(rest, ".")
	for _, s := range segs {
		if s == "" {
			return nil, fmt.Errorf("%q has an empty segment", p)
		}
	}
	return segs, nil
}

func walk(v any, segs []string) any {
	for _, s := range segs {
		switch x := v.(type) {
		case map[string]any:
			v = x[s]
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// validGlob reports a malformed glob: an unterminated class or a trailing
// backslash.
func validGlob(pattern string) error {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			if i+1 == len(pattern) {
				return fmt.Errorf("%q ends in a lone backslash", pattern)
			}
			i++
		case '[':
			_, end, ok := matchClass(pattern[i:], 'x')
			if !ok {
				return fmt.Errorf("%q has an unterminated [ class", pattern)
			}
			i += end - 1
		}
	}
	return nil
}

// globMatch reports whether s matches the whole of pattern (see Rule for
// the syntax). It backtracks only to the last *, so it runs in time
// proportional to len(pattern)·len(s) at worst, whatever the pattern.
func globMatch(pattern, s string) bool {
	px, sx := 0, 0
	starP, starS := -1, -1
	for sx < len(s) {
		if px < len(pattern) {
			c, size := utf8.DecodeRuneInString(s[sx:])
			switch pattern[px] {
			case '*':
				starP, starS = px, sx
				px++
				continue
			case '?':
				px++
				sx += size
				continue
			case '[':
				if ok, end, valid := matchClass(pattern[px:], c); valid && ok {
					px += end
					sx += size
					continue
				} else if !valid {
					return false
				}
			case '\\':
				if px+1 < len(pattern) {
					pc, psize := utf8.DecodeRuneInString(pattern[px+1:])
					if pc == c {
						px += 1 + psize
						sx += size
						continue
					}
				}
			default:
				pc, psize := utf8.DecodeRuneInString(pattern[px:])
				if pc == c {
					px += psize
					sx += size
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		// Let the last * swallow one more character and retry from there.
		_, size := utf8.DecodeRuneInString(s[starS:])
		starS += size
		px, sx = starP+1, starS
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// matchClass matches c against the class that opens pattern ("[...]") and
// returns whether it matched, the length of the class in bytes, and
// whether the class is well formed. A "]" right after "[" or "[!" is a
// member, as in shells.
func matchClass(pattern string, c rune) (matched bool, end int, valid bool) {
	i := 1
	negate := false
	if i < len(pattern) && (pattern[i] == '!' || pattern[i] == '^') {
		negate = true
		i++
	}
	first := true
	for {
		if i >= len(pattern) {
			return false, 0, false
		}
		if pattern[i] == ']' && !first {
			return matched != negate, i + 1, true
		}
		first = false
		lo, size, ok := classChar(pattern, i)
		if !ok {
			return false, 0, false
		}
		i += size
		hi := lo
		if i+1 < len(pattern) && pattern[i] == '-' && pattern[i+1] != ']' {
			h, hsize, ok := classChar(pattern, i+1)
			if !ok {
				return false, 0, false
			}
			hi = h
			i += 1 + hsize
		}
		if lo <= c && c <= hi {
			matched = true
		}
	}
}

func classChar(pattern string, i int) (rune, int, bool) {
	if pattern[i] == '\\' {
		if i+1 >= len(pattern) {
			return 0, 0, false
		}
		r, size := utf8.DecodeRuneInString(pattern[i+1:])
		return r, 1 + size, true
	}
	r, size := utf8.DecodeRuneInString(pattern[i:])
	return r, size, true
}
