package webui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandlerRoutes(t *testing.T) {
	ui, err := New()
	if err != nil {
		t.Fatal(err)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot) // stands for pi-server's WebSocket
	})
	h := ui.Handler(next)
	tests := []struct {
		name, method, path string
		header             map[string]string
		status             int
		ctype              string
		body               string
	}{
		{"page", "GET", "/", nil, 200, "text/html; charset=utf-8", `<script type="module" src="/ui/app.js">`},
		{"page by HEAD", "HEAD", "/", nil, 200, "text/html; charset=utf-8", ""},
		{"script", "GET", "/ui/app.js", nil, 200, "text/javascript; charset=utf-8", "EventSource"},
		{"renderer", "GET", "/ui/md.js", nil, 200, "text/javascript; charset=utf-8", "textContent"},
		{"style", "GET", "/ui/app.css", nil, 200, "text/css; charset=utf-8", ".messages"},
		{"unknown file", "GET", "/ui/nope.js", nil, 404, "text/plain; charset=utf-8", "not a file of agentd's web UI"},
		{"websocket upgrade", "GET", "/", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, 418, "", ""},
		{"upgrade among tokens", "GET", "/", map[string]string{"Connection": "keep-alive, Upgrade"}, 418, "", ""},
		{"POST", "POST", "/", nil, 418, "", ""},
		{"other path", "GET", "/health", nil, 418, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.path, nil)
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d", w.Code, tt.status)
			}
			if tt.status == http.StatusTeapot {
				return
			}
			if got := w.Header().Get("Content-Type"); got != tt.ctype {
				t.Errorf("Content-Type %q, want %q", got, tt.ctype)
			}
			if !strings.Contains(w.Body.String(), tt.body) {
				t.Errorf("body lacks %q", tt.body)
			}
			for k, want := range map[string]string{
				"Content-Security-Policy": securityPolicy,
				"X-Content-Type-Options":  "nosniff",
				"X-Frame-Options":         "DENY",
			} {
				if got := w.Header().Get(k); got != want {
					t.Errorf("%s %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestPolicyForbidsInlineAndOtherOrigins(t *testing.T) {
	for _, want := range []string{"default-src 'none'", "script-src 'self';", "frame-ancestors 'none'", "connect-src 'self';"} {
		if !strings.Contains(securityPolicy, want) {
			t.Errorf("the policy lacks %q: %s", want, securityPolicy)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "*", "http:", "https:"} {
		if strings.Contains(securityPolicy, bad) {
			t.Errorf("the policy allows %q: %s", bad, securityPolicy)
		}
	}
}

func TestNotModified(t *testing.T) {
	ui, err := New()
	if err != nil {
		t.Fatal(err)
	}
	h := ui.Handler(http.NotFoundHandler())
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/ui/app.js", nil))
	etag := w.Header().Get("ETag")
	if etag == "" || w.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, w.Header().Get("Cache-Control"))
	}
	r := httptest.NewRequest("GET", "/ui/app.js", nil)
	r.Header.Set("If-None-Match", etag)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Errorf("status %d with %d bytes, want 304 and none", w.Code, w.Body.Len())
	}
}

// TestNoMarkupFromText guards the rule that model and tool text reaches
// the page only as text: the scripts never assign HTML.
func TestNoMarkupFromText(t *testing.T) {
	for _, name := range []string{"assets/app.js", "assets/md.js", "assets/changes.js"} {
		b, err := embedded.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s uses %s", name, bad)
			}
		}
	}
}
