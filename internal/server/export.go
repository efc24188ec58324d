package server

import (
	"errors"
	"path/filepath"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/session"
)

// ExportHTML writes the session as HTML (export_html) under its working
// directory or the exports folder, never over the server's own files or
// any hosted session's file, and over another existing file only with
// overwrite. It returns the path written.
func (h *Hosted) ExportHTML(path string, overwrite bool) (string, error) {
	s := h.srv
	protected := append([]string{s.index.path}, s.cfg.Protected...)
	if s.cfg.StateDir != "" {
		protected = append(protected, filepath.Join(s.cfg.StateDir, fingerprintKeyFile))
	}
	for _, o := range s.Sessions() {
		protected = append(protected, o.sess.File())
	}
	out, err := h.sess.ExportHTMLFile(session.ExportRequest{Path: path, Cwd: h.cwd, ExportsDir: s.cfg.ExportsDir,
		Overwrite: overwrite, Protected: protected})
	if errors.Is(err, session.ErrExportRefused) {
		return "", fault.Wrap(fault.Forbidden, err, err.Error())
	}
	return out, err
}
