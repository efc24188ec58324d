package compaction

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
)

func TestSummarizeBranch(t *testing.T) {
	branch := func() Branch {
		return Branch{
			Messages: []*llm.Message{
				user("Try the other parser in alt.go"),
				asst("", call("c1", "read", map[string]string{"path": "alt.go"}), call("c2", "write", map[string]string{"path": "new.go", "content": "x"})),
				result("c1", "read", "package alt"),
				asst("Done."),
			},
			// An earlier summary on the path saw these.
			Files: []Details{{ReadFiles: []string{"old.go", "new.go"}, ModifiedFiles: []string{"gone.go"}}},
		}
	}
	tests := []struct {
		name          string
		custom        string
		replace       bool
		want, wantNot []string
	}{
		{name: "default note", want: []string{branchNotePrompt, "Try the other parser in alt.go"}, wantNot: []string{branchCustomLead}},
		{name: "instructions added", custom: "  mention alt.go twice ", want: []string{branchNotePrompt, branchCustomLead + "mention alt.go twice"}},
		{name: "instructions replacing agentd's", custom: "Just list the files.", replace: true,
			want: []string{"</transcript>\n\nJust list the files."}, wantNot: []string{"## Worth Keeping", branchCustomLead}},
		{name: "replace without instructions keeps the default", replace: true, want: []string{branchNotePrompt}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := faux.New(faux.Options{})
			p.Push(faux.Response{Text: "  ## Goal\nTry alt.go  "})
			b := branch()
			b.CustomInstructions, b.ReplaceInstructions = tt.custom, tt.replace
			sum, err := SummarizeBranch(context.Background(), p.Stream, faux.Model(), llm.StreamOptions{}, b)
			if err != nil {
				t.Fatal(err)
			}
			wantSummary := "## Goal\nTry alt.go\n\n<read-files>\nalt.go\nold.go\n</read-files>\n\n<modified-files>\ngone.go\nnew.go\n</modified-files>"
			if sum.Summary != wantSummary {
				t.Errorf("summary\n%s\nwant\n%s", sum.Summary, wantSummary)
			}
			if !slices.Equal(sum.Details.ReadFiles, []string{"alt.go", "old.go"}) || !slices.Equal(sum.Details.ModifiedFiles, []string{"gone.go", "new.go"}) {
				t.Errorf("details %+v", sum.Details)
			}
			reqs := p.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			if reqs[0].SystemPrompt != branchSystemPrompt {
				t.Errorf("system prompt %q", reqs[0].SystemPrompt)
			}
			text := userText(&reqs[0])
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("request lacks %q:\n%s", w, text)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(text, w) {
					t.Errorf("request holds %q:\n%s", w, text)
				}
			}
		})
	}
}

func TestSummarizeBranchRefusesAndFails(t *testing.T) {
	p := faux.New(faux.Options{})
	if _, err := SummarizeBranch(context.Background(), p.Stream, faux.Model(), llm.StreamOptions{}, Branch{}); !errors.Is(err, ErrEmptyBranch) {
		t.Errorf("empty branch: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := Branch{Messages: []*llm.Message{user("hello")}}
	if _, err := SummarizeBranch(ctx, p.Stream, faux.Model(), llm.StreamOptions{}, b); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if n := len(p.Requests()); n != 0 {
		t.Errorf("%d requests for a branch refused before asking", n)
	}
	p.Push(faux.Response{Text: "   "})
	if _, err := SummarizeBranch(context.Background(), p.Stream, faux.Model(), llm.StreamOptions{}, b); err == nil || !strings.HasPrefix(err.Error(), "Branch summarization failed: ") {
		t.Errorf("an empty answer: %v", err)
	}
}
