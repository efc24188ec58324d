// Package webui is agentd's browser UI: static files embedded in the
// binary, served at "/" and under /ui/. The page is a client of the
// conversation API (/api/v2, REST + Server-Sent Events) and of nothing
// else, so it needs no build step and works offline.
package webui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/agentd-dev/agentd/internal/server"
)

//go:embed assets
var embedded embed.FS

// securityPolicy allows the page's own files and API and nothing else: no
// inline script or style, no eval, no other origin, no framing. Model and
// tool output is put on the page as text, so an injection that slipped
// through would still find no script it could run.
const securityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; manifest-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// contentType is the type of a UI file, fixed here rather than taken
// from the system's MIME table, which may name JavaScript something a
// browser refuses a module script as.
func contentType(ext string) (string, bool) {
	switch ext {
	case ".html":
		return "text/html; charset=utf-8", true
	case ".js":
		return "text/javascript; charset=utf-8", true
	case ".css":
		return "text/css; charset=utf-8", true
	case ".svg":
		return "image/svg+xml", true
	}
	return "", false
}

// asset is one embedded file, ready to serve.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

// UI serves the page and its files. The zero value is not usable; call
// New.
type UI struct {
	files map[string]asset // by URL path: "/" and "/ui/<name>"
}

// New reads the embedded files once: they never change while the
// process runs.
func New() (*UI, error) {
	ui := &UI{files: map[string]asset{}}
	err := fs.WalkDir(embedded, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := embedded.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype, ok := contentType(path.Ext(p))
		if !ok {
			return fmt.Errorf("webui: %s: no content type for its extension", p)
		}
		a := asset{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		name := strings.TrimPrefix(p, "assets/")
		ui.files["/ui/"+name] = a
		if name == "index.html" {
			ui.files["/"] = a
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ui, nil
}

// Handler serves the UI in front of next, which keeps every request the
// UI does not answer: a WebSocket upgrade on "/" (pi-server's face), any
// method but GET and HEAD, and paths outside "/" and /ui/.
func (ui *UI) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ui.wants(r) {
			next.ServeHTTP(w, r)
			return
		}
		ui.serve(w, r)
	})
}

// wants reports whether a request is the UI's.
func (ui *UI) wants(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if server.IsUpgrade(r) {
		return false
	}
	p := r.URL.Path
	return p == "/" || strings.HasPrefix(p, "/ui/")
}

func (ui *UI) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", securityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	a, ok := ui.files[r.URL.Path]
	if !ok {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("Not found: " + r.URL.Path + " is not a file of agentd's web UI\n"))
		return
	}
	// Revalidated on every load, so a new binary's files are used at
	// once; an unchanged file costs a 304.
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("Content-Type", a.ctype)
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	_, _ = w.Write(a.body)
}

func etagMatches(header, etag string) bool {
	for _, v := range strings.Split(header, ",") {
		v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
		if v == etag || v == "*" {
			return true
		}
	}
	return false
}
