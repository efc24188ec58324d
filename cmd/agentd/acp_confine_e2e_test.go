package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// The editor (the official SDK as a client offering fs and terminal)
// acts with its own rights, so agentd acp, confined to the workspace by
// default, sends it nothing the sandbox would refuse: the model's write
// outside the workspace is refused as the built-in tool refuses it and
// never goes out as fs/write_text_file; a write inside does; bash never
// goes out as terminal/create but runs here under the sandbox.
func TestACPEditorRequestsHeldToTheSandbox(t *testing.T) {
	acpNodeModules(t)
	if s := sandbox.Probe(); s.Err != nil {
		t.Skipf("no Landlock on this kernel: agentd acp runs unconfined: %v", s.Err)
	}
	e := e2eNewEnv(t, e2eOpts{})
	outside := filepath.Join(e.root, "outside.txt")
	inside := filepath.Join(e.cwd, "inside.txt")
	e.tweak("WRITE-OUT", func(s *wiremock.Script) {
		*s = e2eToolScript("write", map[string]string{"path": outside, "content": "escaped"})
	})
	e.tweak("WRITE-IN", func(s *wiremock.Script) {
		*s = e2eToolScript("write", map[string]string{"path": inside, "content": "fine"})
	})
	e.tweak("BASH-OUT", func(s *wiremock.Script) {
		*s = e2eToolScript("bash", map[string]string{"command": "echo ran-here; echo escaped > " + outside})
	})
	steps := e.acpClient([]string{"init-editor", "new", "reject:WRITE-OUT", "prompt:WRITE-IN", "reject:BASH-OUT", "editor-log"})
	if end := acpToolEnd(acpFind(t, steps, "reject:WRITE-OUT")); end == nil || end["status"] != "failed" || !strings.Contains(fmt.Sprint(end["content"]), "sandbox") {
		t.Fatalf("write outside the workspace: %v", end)
	}
	if end := acpToolEnd(acpFind(t, steps, "prompt:WRITE-IN")); end == nil || end["status"] != "completed" {
		t.Fatalf("write inside the workspace: %v", end)
	}
	bash := acpFind(t, steps, "reject:BASH-OUT")
	if end := acpToolEnd(bash); end == nil || !strings.Contains(fmt.Sprint(end["content"]), "ran-here") {
		t.Fatalf("bash: %v", end)
	}
	if len(bash.Asked) != 1 {
		t.Errorf("the sandbox's refusal was not put to the editor's user: %v", bash.Asked)
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Fatalf("a file outside the workspace was written: %v", err)
	}
	reqs := acpFind(t, steps, "editor-log").Result["requests"].([]any)
	var wroteInside bool
	for _, r := range reqs {
		r := r.(map[string]any)
		switch {
		case r["method"] == "terminal/create":
			t.Errorf("bash went to the editor's terminal: %v", r)
		case r["method"] == "fs/write_text_file" && r["path"] == outside:
			t.Errorf("the write outside went to the editor: %v", r)
		case r["method"] == "fs/write_text_file" && r["path"] == inside:
			wroteInside = true
		}
	}
	if !wroteInside {
		t.Errorf("the write inside did not go through the editor: %v", reqs)
	}
}
