package interaction

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/tool"
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
// for bash; path for read, write, edit, ls, find and grep. A string
// argument is matched as is, a number or boolean as its JSON text. When
// the argument is missing, is an object or array, or the tool has no key
// argument, a rule with a Match does not match.
//
// Globs: * matches any run of characters, including "/" and spaces (so
// "git *" matches "git push origin main" and "/etc/*" everything under
// /etc); ? matches one character; [abc], [a-z] and [!a-z] match one
// character of a class; a backslash makes the next character literal.
// Matching is case-sensitive and covers the whole string.
//
// Path rules (a Match on the path of read, write, edit, ls, find or grep,
// with no Arg or Arg "args.path") are matched against the file the tool
// will open, not the text the model wrote: the path is resolved as the
// tool resolves it (an "@" prefix dropped, "~" expanded, relative to the
// session's working directory, cleaned; an empty path of ls, find or grep
// is the working directory), so "../prot/x", "~/../prot/x" and "@/prot/x"
// are all "/prot/x" to a rule. The pattern is resolved the same way: one
// that does not start with a wildcard is a path, so ".env" and "./*" mean
// the working directory's .env and everything under the working
// directory, and "~/.ssh/*" everything under the home directory's .ssh. A
// pattern that starts with a wildcard ("*.pem", "*secret*") matches
// anywhere.
//
// Symlinks. A symlink leads a tool somewhere its path does not say
// (cwd/link/x may be /prot/x), so a path has two forms: the absolute path
// as resolved above, and the real path, with every symlink along it
// followed (tool.RealPath; for a file that does not exist yet, as write
// creates it, the symlinks of its nearest existing parent, and a dangling
// link at the end is followed to what it would create). A pattern has the
// same two forms, from the literal directory before its first wildcard
// (a partial name, "/pro*", is not resolved): when /prot is a link to
// /data/prot, "/prot/*" also covers "/data/prot/*", since a rule written
// on a name means the files behind it. A rule matches a form of the path
// when either form of its pattern does. The rules are tried in order for
// each form of the path, and the more restrictive answer wins (deny over
// ask over allow): a call is denied or asked about if either the path it
// names or the file it reaches is, so neither a link into a protected
// tree nor a link out of an allowed one gets past a rule, and a rule on a
// link's own name still holds for paths through it. The price is that an
// allow rule must cover both forms to allow: "/data/prot/*" alone does
// not allow a call that names /prot/x. What path rules do not see: a file
// that changes between the check and the open (a link re-pointed by a
// bash command in the same turn), hard links, and what find and grep walk
// past under the directory they start from (a rule on "/prot/*" does not
// stop a grep of "/"; a rule on the directories above it does).
//
// Path rules bind the file tools only. A bash command's rule matches the
// command text: "cat /prot/x" can be denied by "*/prot/*", but bash can
// reach any file the server can, by a name no rule foresees, so a policy
// cannot confine bash; ask before or deny bash for that.
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
// when the default did. env is the environment of the tools the call
// runs with (the session's, as its tools were built with it): path rules
// resolve the call's path and their own patterns against env.Cwd and
// env.Home, as the tools do.
func (p Policy) Evaluate(env tool.Env, call tool.Call) (Action, *Rule) {
	s := &subject{env: env, call: call}
	action, rule := p.pass(s, 0)
	// s.paths is known only once a path rule needed it; a pass that never
	// needed it decides every form alike.
	for form := 1; form < len(s.paths); form++ {
		if a, r := p.pass(s, form); severity(a) > severity(action) {
			action, rule = a, r
		}
	}
	return action, rule
}

// pass decides the call in order of the rules, with form as its path.
func (p Policy) pass(s *subject, form int) (Action, *Rule) {
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.Tool != "" && !globMatch(r.Tool, s.call.Name) {
			continue
		}
		if r.Match != "" && !s.matches(i, r, form) {
			continue
		}
		return r.Action.orAllow(), r
	}
	return p.Default.orAllow(), nil
}

func severity(a Action) int {
	switch a {
	case ActionDeny:
		return 2
	case ActionAsk:
		return 1
	}
	return 0
}

// subject is one call under evaluation, with what rules need of it worked
// out once and only when a rule needs it: most policies decide on the
// tool name alone.
type subject struct {
	env  tool.Env
	call tool.Call

	decoded bool
	args    any

	resolved bool
	// paths are the forms of the call's path: absolute as the tool
	// resolves it, then real (symlinks followed) when that differs. Nil
	// when the call has no usable path.
	paths []string
	// patterns are the forms of each path rule's pattern, by rule index.
	patterns map[int][]string
}

func (s *subject) decode() any {
	if !s.decoded {
		s.decoded = true
		if err := json.Unmarshal(s.call.Args, &s.args); err != nil {
			s.args = nil
		}
	}
	return s.args
}

// isPathRule reports whether r's Match is about the file the call opens.
func (s *subject) isPathRule(r *Rule) bool {
	return keyArgument[s.call.Name] == "path" && (r.Arg == "" || r.Arg == "args.path")
}

func (s *subject) matches(i int, r *Rule, form int) bool {
	if !s.isPathRule(r) {
		v, ok := r.argument(s.call.Name, s.decode())
		return ok && globMatch(r.Match, v)
	}
	paths := s.pathForms()
	if len(paths) == 0 {
		return false
	}
	pats, ok := s.patterns[i]
	if !ok {
		pats = patternForms(s.env, s.call.Name, r.Match)
		if s.patterns == nil {
			s.patterns = make(map[int][]string)
		}
		s.patterns[i] = pats
	}
	for _, pat := range pats {
		if globMatch(pat, paths[form]) {
			return true
		}
	}
	return false
}

func (s *subject) pathForms() []string {
	if s.resolved {
		return s.paths
	}
	s.resolved = true
	obj, _ := s.decode().(map[string]any)
	var text string
	if v, present := obj["path"]; present {
		var ok bool
		if text, ok = v.(string); !ok {
			// The tool refuses a path that is not a string.
			return nil
		}
	}
	s.paths = pathForms(s.env, s.call.Name, text)
	return s.paths
}

// pathForms returns the forms of the path the tool toolName opens for its
// argument text, nil when the tool would refuse the argument.
func pathForms(env tool.Env, toolName, text string) []string {
	abs, err := env.ResolvePath(toolName, text)
	if err != nil {
		return nil
	}
	real, err := tool.RealPath(abs)
	if err != nil || real == abs {
		// A loop of links: the tool's open fails on it too.
		return []string{abs}
	}
	return []string{abs, real}
}

// patternForms returns the globs a path rule's pattern stands for: the
// pattern itself when it starts with a wildcard, else its literal
// directory (or the whole pattern, when it has no wildcard) resolved as
// the tool resolves a path, then with symlinks followed when that differs,
// each with the rest of the pattern after it.
func patternForms(env tool.Env, toolName, pattern string) []string {
	if strings.IndexByte("*?[", pattern[0]) >= 0 {
		return []string{pattern}
	}
	lit, rest := pattern, ""
	if i := firstWildcard(pattern); i >= 0 {
		// The directory part only: a partial name ("/prot*") is not a
		// file to resolve.
		j := strings.LastIndexByte(pattern[:i], '/')
		switch {
		case j < 0:
			lit, rest = ".", pattern
		case j == 0:
			lit, rest = "/", pattern[1:]
		default:
			lit, rest = pattern[:j], pattern[j+1:]
		}
	}
	forms := pathForms(env, toolName, unescapeGlob(lit))
	if forms == nil {
		return []string{pattern}
	}
	out := make([]string, len(forms))
	for k, f := range forms {
		out[k] = escapeGlob(f)
		if rest != "" {
			out[k] = strings.TrimSuffix(out[k], "/") + "/" + rest
		}
	}
	return out
}

// firstWildcard returns the index of the first unescaped *, ? or [ in
// pattern, -1 when there is none.
func firstWildcard(pattern string) int {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '*', '?', '[':
			return i
		}
	}
	return -1
}

func unescapeGlob(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func escapeGlob(s string) string {
	if !strings.ContainsAny(s, "*?[\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte("*?[\\", s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
	return scalar(obj[key])
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
