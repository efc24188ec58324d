package session

import (
	"encoding/json"

	"github.com/agentd-dev/agentd/internal/llm"
)

// spendingTool is the tool whose results report what it spent on models:
// the task tool (package subagent), whose child session's usage is part
// of what its parent cost.
const spendingTool = "task"

// spentBy is the model usage a tool result reports in its details
// (details.usage), counted in the session's stats as its own answers
// are: a subagent's tokens and cost are its parent's too.
func spentBy(m *llm.Message) llm.Usage {
	if m.ToolName != spendingTool || len(m.Details) == 0 {
		return llm.Usage{}
	}
	var d struct {
		Usage llm.Usage `json:"usage"`
	}
	if json.Unmarshal(m.Details, &d) != nil {
		return llm.Usage{}
	}
	return d.Usage
}
