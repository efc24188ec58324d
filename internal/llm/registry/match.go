package registry

import (
	"fmt"
	"sort"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Resolve finds the model a user named, in pi's spec syntax:
//
//	provider/id            anthropic/claude-sonnet-4-6
//	id                     claude-sonnet-4-6 (when only one provider has it)
//	provider/id:thinking   openai/gpt-5.4:high
//	id:thinking            claude-opus-4-7:xhigh
//
// Ids may themselves contain "/" and ":" (openrouter/anthropic/claude-x,
// ollama/llama3.1:8b); the whole spec is tried as a model first, and a
// suffix after the last ":" is only taken as a thinking level when it is
// one. The returned level is empty when the spec names none; callers then
// use their default. Matching is exact, then case-insensitive.
//
// Errors wrap ErrUnknownModel (listing close matches), ErrAmbiguousModel
// (naming the candidates) or ErrUnavailable (saying why).
func (r *Registry) Resolve(spec string) (*llm.Model, llm.ThinkingLevel, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, "", fmt.Errorf("no model given: %w", ErrUnknownModel)
	}
	e, err := r.match(s)
	level := llm.ThinkingLevel("")
	if err != nil && isUnknown(err) {
		if i := strings.LastIndexByte(s, ':'); i > 0 {
			if e2, err2 := r.match(s[:i]); !isUnknown(err2) {
				l, lerr := llm.ParseThinkingLevel(s[i+1:])
				if lerr != nil {
					return nil, "", fmt.Errorf("%q: %w", s, lerr)
				}
				e, err, level = e2, err2, l
			}
		}
	}
	if err != nil {
		return nil, "", err
	}
	if !e.Available {
		return nil, "", fmt.Errorf("model %s/%s is not available: %w", e.Model.Provider, e.Model.ID, &unavailableError{reason: e.Reason})
	}
	return e.Model, level, nil
}

type matchError struct {
	msg string
	err error
}

func (e *matchError) Error() string { return e.msg }
func (e *matchError) Unwrap() error { return e.err }

func isUnknown(err error) bool {
	me, ok := err.(*matchError)
	return ok && me.err == ErrUnknownModel
}

// match finds the one entry s names, without a thinking suffix.
func (r *Registry) match(s string) (Entry, error) {
	// provider/id, when the part before the first "/" is a provider.
	if i := strings.IndexByte(s, '/'); i > 0 {
		provider, id := s[:i], s[i+1:]
		if e, ok := r.matchIn(provider, id); ok {
			return e, nil
		}
	}
	var exact, folded []Entry
	for _, e := range r.entries {
		switch {
		case e.Model.ID == s:
			exact = append(exact, e)
		case strings.EqualFold(e.Model.ID, s):
			folded = append(folded, e)
		}
	}
	found := exact
	if len(found) == 0 {
		found = folded
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return Entry{}, r.unknown(s)
	}
	names := make([]string, len(found))
	for i, e := range found {
		names[i] = e.Model.Provider + "/" + e.Model.ID
	}
	return Entry{}, &matchError{
		msg: fmt.Sprintf("model %q is offered by several providers; name one of: %s", s, strings.Join(names, ", ")),
		err: ErrAmbiguousModel,
	}
}

func (r *Registry) matchIn(provider, id string) (Entry, bool) {
	var folded []Entry
	for _, e := range r.entries {
		if !strings.EqualFold(e.Model.Provider, provider) {
			continue
		}
		if e.Model.Provider == provider && e.Model.ID == id {
			return e, true
		}
		if strings.EqualFold(e.Model.ID, id) {
			folded = append(folded, e)
		}
	}
	if len(folded) == 1 {
		return folded[0], true
	}
	return Entry{}, false
}

// unknown builds the "no such model" error with the closest names.
func (r *Registry) unknown(s string) error {
	type cand struct {
		name string
		dist int
	}
	query := strings.ToLower(s)
	bareQuery := query
	if i := strings.IndexByte(query, '/'); i > 0 {
		if _, ok := r.providers[s[:i]]; ok {
			bareQuery = query[i+1:]
		}
	}
	var cands []cand
	for _, e := range r.entries {
		full := e.Model.Provider + "/" + e.Model.ID
		id := strings.ToLower(e.Model.ID)
		d := editDistance(bareQuery, id)
		if fd := editDistance(query, strings.ToLower(full)); fd < d {
			d = fd
		}
		near := d <= max(2, len(bareQuery)/4)
		if len(bareQuery) >= 3 && (strings.Contains(id, bareQuery) || strings.Contains(bareQuery, id)) {
			near = true
		}
		if near {
			cands = append(cands, cand{full, d})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].dist < cands[j].dist })
	const maxSuggestions = 5
	if len(cands) > maxSuggestions {
		cands = cands[:maxSuggestions]
	}
	msg := fmt.Sprintf("unknown model %q", s)
	if len(cands) > 0 {
		names := make([]string, len(cands))
		for i, c := range cands {
			names[i] = c.name
		}
		msg += "; did you mean " + strings.Join(names, ", ") + "?"
	} else {
		msg += "; list the models to see what is configured"
	}
	return &matchError{msg: msg, err: ErrUnknownModel}
}

// editDistance is the Levenshtein distance between a and b, in bytes:
// model ids are ASCII.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
