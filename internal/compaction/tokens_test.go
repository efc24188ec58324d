package compaction

import (
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

func TestEstimateTokens(t *testing.T) {
	code := 1
	tests := []struct {
		name string
		m    *llm.Message
		want int64
	}{
		{"nil", nil, 0},
		{"empty user", user(""), 0},
		{"four chars", user("abcd"), 1},
		{"rounds up", user("abcde"), 2},
		{"user image", &llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text("abcd"), llm.Image("xx", "image/png")}}, 1201},
		{"two-byte characters count once", user("éééé"), 1},
		{"CJK counts once per character", user("漢字漢字漢字漢字"), 2},
		{"astral characters count twice", user("😀😀"), 1},
		{"assistant text thinking and call", &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{
			llm.Text(tokens(3)),
			{Type: llm.ContentThinking, Thinking: tokens(2)},
			llm.ToolCall("c1", "read", []byte(`{"path":"a.go"}`)), // 4 + 15 chars
		}}, 5 + 5},
		{"tool result with image", &llm.Message{Role: llm.RoleToolResult, Content: []llm.Content{llm.Text("abcd"), llm.Image("x", "image/png")}}, 1201},
		{"custom", custom(tokens(7)), 7},
		{"bash", &llm.Message{Role: llm.RoleBashExecution, Command: "ls", Output: "a.go\nb.go", ExitCode: &code}, 3},
		{"branch summary", &llm.Message{Role: llm.RoleBranchSummary, Summary: tokens(10)}, 10},
		{"compaction summary", compactionMsg(tokens(11)), 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EstimateTokens(tt.m); got != tt.want {
				t.Errorf("EstimateTokens = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestContextTokens(t *testing.T) {
	withUsage := func(u llm.Usage, stop llm.StopReason) *llm.Message {
		m := asst(tokens(50))
		m.Usage, m.StopReason = u, stop
		return m
	}
	parts := llm.Usage{Input: 1000, Output: 200, CacheRead: 30, CacheWrite: 4}
	tests := []struct {
		name string
		msgs []*llm.Message
		want int64
	}{
		{"empty", nil, 0},
		{"no usage: everything estimated", []*llm.Message{user(tokens(10)), asst(tokens(20)), user(tokens(5))}, 35},
		{"usage parts summed plus trailing", []*llm.Message{user(tokens(10)), withUsage(parts, llm.StopStop), user(tokens(5)), custom(tokens(2))}, 1234 + 7},
		{"total preferred", []*llm.Message{withUsage(llm.Usage{Input: 1, TotalTokens: 999}, llm.StopToolUse), result("c", "read", tokens(3))}, 1002},
		{"newest usage wins", []*llm.Message{withUsage(llm.Usage{Input: 10}, llm.StopStop), user(tokens(1)), withUsage(llm.Usage{Input: 500}, llm.StopStop)}, 500},
		{"aborted and failed skipped", []*llm.Message{
			withUsage(llm.Usage{Input: 100}, llm.StopStop), user(tokens(1)),
			withUsage(llm.Usage{Input: 9000}, llm.StopAborted), withUsage(llm.Usage{Input: 9000}, llm.StopError),
		}, 100 + 1 + 50 + 50},
		{"zero usage means unreported", []*llm.Message{withUsage(llm.Usage{Input: 100}, llm.StopStop), withUsage(llm.Usage{}, llm.StopStop)}, 150},
		{"summary counted without usage", []*llm.Message{compactionMsg(tokens(40)), user(tokens(2))}, 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ContextTokens(tt.msgs); got != tt.want {
				t.Errorf("ContextTokens = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestShouldCompact(t *testing.T) {
	def := DefaultSettings()
	off := def
	off.Enabled = false
	tests := []struct {
		name           string
		tokens, window int64
		s              Settings
		want           bool
	}{
		{"below threshold", 100000 - 16384 - 1, 100000, def, false},
		{"at threshold", 100000 - 16384, 100000, def, false},
		{"one past threshold", 100000 - 16384 + 1, 100000, def, true},
		{"overflowing", 200000, 100000, def, true},
		{"disabled", 200000, 100000, off, false},
		{"unknown window", 200000, 0, def, false},
		{"reserve larger than window", 1, 1000, Settings{Enabled: true, ReserveTokens: 2000}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ShouldCompact(tt.tokens, tt.window, tt.s); got != tt.want {
				t.Errorf("ShouldCompact(%d, %d) = %v, want %v", tt.tokens, tt.window, got, tt.want)
			}
		})
	}
}

func TestDefaultSettings(t *testing.T) {
	if got := DefaultSettings(); got != (Settings{Enabled: true, ReserveTokens: 16384, KeepRecentTokens: 20000}) {
		t.Errorf("DefaultSettings = %+v", got)
	}
}
