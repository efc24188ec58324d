package registry

import (
	"errors"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

func TestPick(t *testing.T) {
	a := &llm.Model{Provider: "anthropic", ID: "claude"}
	b := &llm.Model{Provider: "openrouter", ID: "claude"}
	c := &llm.Model{Provider: "openai", ID: "gpt"}
	d := &llm.Model{Provider: "openrouter", ID: "meta/llama"}
	models := []*llm.Model{a, b, c, d}
	cases := []struct {
		name string
		want *llm.Model
		err  error
	}{
		{"anthropic/claude", a, nil},
		{"openrouter/claude", b, nil},
		{"gpt", c, nil},
		{"openai/gpt", c, nil},
		{"openrouter/meta/llama", d, nil},
		{"claude", nil, ErrAmbiguousModel},
		{"meta/llama", nil, ErrUnknownModel}, // a "/" always names a provider
		{"Claude", nil, ErrUnknownModel},     // exact, not case-folded
		{"gpt:high", nil, ErrUnknownModel},   // no thinking suffix
		{"/gpt", nil, ErrUnknownModel},
		{"", nil, ErrUnknownModel},
	}
	for _, tc := range cases {
		got, err := Pick(models, tc.name)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("Pick(%q) = %v, %v; want %v, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}
