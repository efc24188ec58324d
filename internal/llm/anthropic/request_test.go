package anthropic

import (
	"regexp"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

var apiToolID = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func TestToolCallID(t *testing.T) {
	long := strings.Repeat("a", 65)
	tests := []struct {
		id   string
		keep bool
	}{
		{"toolu_01T1x1fJ34qAmk2tNTrN7Up6", true},
		{"call_abc-DEF_123", true},
		{strings.Repeat("b", 64), true},
		{long, false},
		{"call_Xk2p|fc_68a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f607", false},
		{"call.1", false},
		{"call:1", false},
		{"functions.read:0", false},
		{"", false},
		{"ünïcode", false},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := ToolCallID(tt.id)
		if !apiToolID.MatchString(got) {
			t.Errorf("ToolCallID(%q) = %q: not accepted by the API", tt.id, got)
		}
		if (got == tt.id) != tt.keep {
			t.Errorf("ToolCallID(%q) = %q, keep %v", tt.id, got, tt.keep)
		}
		if again := ToolCallID(tt.id); again != got {
			t.Errorf("ToolCallID(%q) not stable: %q then %q", tt.id, got, again)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%q and %q both map to %q", other, tt.id, got)
		}
		seen[got] = tt.id
	}
	if got := ToolCallID(long); !strings.HasPrefix(got, strings.Repeat("a", 47)+"_") {
		t.Errorf("long id %q does not keep its readable prefix", got)
	}
}

func TestThinkingBudgetFit(t *testing.T) {
	tests := []struct {
		max, modelMax, budget int64
		wantMax, wantBudget   int64
		ok                    bool
	}{
		{32000, 64000, 10240, 42240, 10240, true},
		{32000, 0, 32768, 64768, 32768, true}, // unknown model limit: no cap
		{32000, 40000, 32768, 40000, 32768, true},
		{4096, 8192, 8192, 8192, 7168, true}, // the answer keeps 1024
		{100, 2000, 1024, 1124, 1024, true},  // never below the minimum
		{100, 1024, 1024, 1024, 1024, false}, // no room for any answer
	}
	for _, tt := range tests {
		gotMax, gotBudget, ok := thinkingBudget(tt.max, tt.modelMax, tt.budget)
		if gotMax != tt.wantMax || gotBudget != tt.wantBudget || ok != tt.ok {
			t.Errorf("thinkingBudget(%d, %d, %d) = %d, %d, %v; want %d, %d, %v",
				tt.max, tt.modelMax, tt.budget, gotMax, gotBudget, ok, tt.wantMax, tt.wantBudget, tt.ok)
		}
		if ok && (gotBudget < minThinkingBudget || gotBudget >= gotMax) {
			t.Errorf("budget %d does not fit max_tokens %d", gotBudget, gotMax)
		}
	}
}

func TestEffort(t *testing.T) {
	want := map[llm.ThinkingLevel]string{
		llm.ThinkingMinimal: "low", llm.ThinkingLow: "low", llm.ThinkingMedium: "medium",
		llm.ThinkingHigh: "high", llm.ThinkingXHigh: "max",
	}
	for l, w := range want {
		if got := effort(l); string(got) != w {
			t.Errorf("effort(%s) = %s, want %s", l, got, w)
		}
	}
}

func TestPlainMessage(t *testing.T) {
	tests := map[string]string{
		"upstream connect error\n": "upstream connect error",
		"<html>502</html>":         "",
		"":                         "",
		`{"message":"x"}`:          "",
		strings.Repeat("x", 201):   "",
	}
	for in, want := range tests {
		if got := plainMessage(in); got != want {
			t.Errorf("plainMessage(%q) = %q, want %q", in, got, want)
		}
	}
}
