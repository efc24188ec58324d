package convapi

import (
	"net/http"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/registry"
)

func (s *Server) root(w http.ResponseWriter, _ *http.Request, _ params) error {
	configured := false
	if d := s.opt.DefaultModel; d != nil {
		_, err := registry.Pick(s.opt.Models.Available(), modelName(d))
		configured = err == nil
	}
	w.Header().Set("X-API-Version", "2")
	writeJSON(w, http.StatusOK, RootResponse{Message: "agentd v2 API", Documentation: "/api/v2/openapi.json", Version: s.opt.Version,
		APIVersion: APIVersion, ContractRevision: ContractRevision, ProviderConfigured: configured,
		Capabilities: map[string]bool{"event_resume": true, "tool_confirmation": true, "elicitation": true, "message_edit": true,
			"external_session_catalog": false, "external_session_transcript": false}})
	return nil
}

func (s *Server) version(w http.ResponseWriter, _ *http.Request, _ params) error {
	w.Header().Set("X-API-Version", "2")
	writeJSON(w, http.StatusOK, VersionResponse{APIVersion: APIVersion, ContractRevision: ContractRevision})
	return nil
}

func (s *Server) setCookie(w http.ResponseWriter, r *http.Request, _ params) error {
	if s.opt.Token == "" && !s.srv.VerifiesJWT() {
		writeJSON(w, http.StatusOK, CookieResponse{OK: true, Message: "No token is configured: requests need no credentials"})
		return nil
	}
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if !strings.HasPrefix(strings.ToLower(h), "bearer ") {
		return fault.New(fault.Unauthorized, "Missing authentication credentials: send Authorization: Bearer <token> to set the cookie")
	}
	// The cookie holds the credential the request was authorized with:
	// a JWT's holder gets its JWT back, never the shared token.
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: strings.TrimSpace(h[len("bearer "):]), Path: "/api/", MaxAge: 86400, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	writeJSON(w, http.StatusOK, CookieResponse{OK: true, Message: "Auth cookie set"})
	return nil
}

func (s *Server) clearCookie(w http.ResponseWriter, r *http.Request, _ params) error {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/api/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	writeJSON(w, http.StatusOK, CookieResponse{OK: true, Message: "Auth cookie cleared"})
	return nil
}

// catalog is a model source that also knows the models it cannot use
// now, and why (the registry).
type catalog interface {
	All() []registry.Entry
}

func (s *Server) models(w http.ResponseWriter, r *http.Request, _ params) error {
	out := ModelsResponse{Models: []ModelInfo{}, Recommended: []string{}, Favorites: []string{}}
	info := func(m *llm.Model) ModelInfo {
		return ModelInfo{ID: modelName(m), Provider: m.Provider, Model: m.ID, Name: m.Name,
			Context: m.ContextWindow, MaxOutput: m.MaxTokens, SupportsStreaming: true, SupportsVision: m.SupportsImages(),
			SupportsReasoning: m.Reasoning, PriceInput: m.Cost.Input, PriceOutput: m.Cost.Output, Available: true}
	}
	all := r.URL.Query().Get("all")
	if all != "" && all != "true" && all != "false" {
		return fault.New(fault.Invalid, "all must be true or false")
	}
	if c, ok := s.opt.Models.(catalog); ok && all == "true" {
		for _, e := range c.All() {
			mi := info(e.Model)
			mi.Available, mi.UnavailableReason = e.Available, e.Reason
			out.Models = append(out.Models, mi)
		}
	} else {
		for _, m := range s.opt.Models.Available() {
			out.Models = append(out.Models, info(m))
		}
	}
	if d := s.opt.DefaultModel; d != nil {
		name := modelName(d)
		out.Default = &name
		out.Recommended = append(out.Recommended, name)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
