package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The web UI attaches a file and an image to a message: chosen with the
// attach button's file input, shown as removable chips, uploaded to the
// conversation when the message is sent and named in its files; the
// model (one that takes images) gets the text file's content and the
// image, and nothing is written in the workspace.
func TestWebUIAttachFiles(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{proxy: true, extra: []any{map[string]any{
		"id": "vision-model", "name": "Vision Model", "reasoning": false, "input": []string{"text", "image"},
		"cost": map[string]float64{"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0}, "contextWindow": 128000, "maxTokens": 4096,
		"compat": map[string]bool{"supportsDeveloperRole": false, "supportsReasoningEffort": false},
	}}})
	s := svStartInProc(t, e)
	p := wuOpen(t, browser, s)
	p.newConversation("attach")
	id := wuEval[string](p, `decodeURIComponent(location.hash.slice(4))`)
	rsOK(t, s, "PATCH", rsConvPath(id)+"/config", map[string]any{"chat": map[string]any{"model": "mock/vision-model"}})

	local := t.TempDir() // the browser's machine
	png, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")
	files := map[string][]byte{"notes.txt": []byte("attached-words-42\n"), "pic.png": png, "drop.txt": []byte("not sent")}
	var paths []string
	for _, n := range []string{"notes.txt", "pic.png", "drop.txt"} {
		path := filepath.Join(local, n)
		if err := os.WriteFile(path, files[n], 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	p.run(chromedp.SetUploadFiles(chromedp.CSS("#attach"), paths))
	p.until("three chips", `document.querySelectorAll('#attached .chip').length === 3 && !document.getElementById('attached').hidden`)
	// One removed again.
	p.run(chromedp.Click(chromedp.CSS(`#attached button[aria-label="Remove drop.txt"]`)))
	p.until("two chips", `[...document.querySelectorAll('#attached .chip')].map((c) => c.firstChild.textContent).join(',') === 'notes.txt,pic.png'`)

	p.send("look at these")
	p.until("the answer", shows("Hello from mock! You said: look at these"))
	p.until("the chips gone", `document.getElementById('attached').hidden`)

	var user string
	for _, r := range e.mock.Requests() {
		if strings.Contains(string(r.Body), "look at these") {
			user = string(r.Body)
		}
	}
	if !strings.Contains(user, "attached-words-42") || !strings.Contains(user, "notes.txt") || !strings.Contains(user, `"url":"data:image/png;base64,`+base64.StdEncoding.EncodeToString(png)+`"`) || strings.Contains(user, "not sent") {
		t.Fatalf("the model's request lacks the files (or has the removed one):\n%s", e2eClip(user, 3000))
	}
	for n := range files {
		if _, err := os.Stat(filepath.Join(e.cwd, n)); err == nil {
			t.Errorf("%s was written in the workspace", n)
		}
	}
}
