package registry

import (
	"fmt"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Pick finds the model name names among models (what a face offers:
// Registry.Available, or a fixed list): "provider/id" exactly, or a bare
// id when exactly one of the models has it. Unlike Resolve it matches
// exactly and takes no thinking suffix: it is the rule of a protocol's
// model field (pi's set_model, REST's model), not of a person typing
// --model. A name with a "/" is always provider/id. Errors wrap
// ErrUnknownModel or ErrAmbiguousModel; each face words them its way.
func Pick(models []*llm.Model, name string) (*llm.Model, error) {
	provider, id, hasProvider := strings.Cut(name, "/")
	var found *llm.Model
	for _, m := range models {
		switch {
		case hasProvider && m.Provider == provider && m.ID == id:
			return m, nil
		case !hasProvider && m.ID == name:
			if found != nil {
				return nil, fmt.Errorf("model %q is offered by several providers: %w", name, ErrAmbiguousModel)
			}
			found = m
		}
	}
	if found == nil {
		return nil, fmt.Errorf("model %q: %w", name, ErrUnknownModel)
	}
	return found, nil
}
