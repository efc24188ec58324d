package server

import (
	"context"
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/jwtauth"
)

// TokenVerifier checks a JWT and returns its claims (jwtauth.Verifier).
type TokenVerifier interface {
	Verify(token string) (jwtauth.Claims, error)
}

// Principal is who a connection or request acts for.
type Principal struct {
	// Subject is the verified identity: a JWT's sub, or the name an
	// auth command gave. "" for a client that presented the shared token
	// (or none, where none is required).
	Subject string
	// Scoped limits the principal to its own sessions (those created by
	// Subject) and Sessions: a client authenticated by a JWT. Other
	// principals reach every session.
	Scoped bool
	// Sessions are session ids a JWT grants besides the subject's own;
	// "*" grants every session.
	Sessions []string
}

// Own is a command id or idempotency key in the principal's own
// namespace. The pipeline remembers both server-wide for replay; a scoped
// principal's are kept apart, so one subject reusing another's id or key
// never gets the other's answer. A NUL, which no client id may hold,
// separates the namespace. Other principals, and "", are unchanged.
func (p Principal) Own(id string) string {
	if !p.Scoped || id == "" {
		return id
	}
	return "sub:" + p.Subject + "\x00" + id
}

// ClientID is id (made by Own) as its client sent it.
func ClientID(id string) string {
	if strings.HasPrefix(id, "sub:") {
		if i := strings.IndexByte(id, 0); i >= 0 {
			return id[i+1:]
		}
	}
	return id
}

// ClientText is a message naming ids made by Own, as their clients
// wrote them.
func ClientText(msg string) string {
	for {
		i := strings.Index(msg, "sub:")
		if i < 0 {
			return msg
		}
		j := strings.IndexByte(msg[i:], 0)
		if j < 0 {
			return msg
		}
		msg = msg[:i] + msg[i+j+1:]
	}
}

// MaySee reports whether p may watch or drive session id, owned by owner
// ("" for a session nobody authenticated created).
func (p Principal) MaySee(id, owner string) bool {
	if !p.Scoped {
		return true
	}
	if p.Subject != "" && owner == p.Subject {
		return true
	}
	return slices.Contains(p.Sessions, "*") || slices.Contains(p.Sessions, id)
}

// Credential is what a request presents: "Authorization: Bearer <t>" or,
// for clients that cannot set headers (a browser's WebSocket), "?token=".
func Credential(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
			return strings.TrimSpace(h[7:])
		}
		return strings.TrimSpace(h)
	}
	return r.URL.Query().Get("token")
}

// IdentifyOptions say which credentials a face accepts.
type IdentifyOptions struct {
	// Token is the server's shared token ("" when none is set).
	Token string
	// RequireJWT refuses the shared token: the face authorizes per
	// session, which only a JWT's subject allows.
	RequireJWT bool
	// Transport names the transport for the auth command.
	Transport string
	// Credential reads what the request presents, when the face reads
	// more than Credential does (REST's cookie) or refuses a malformed
	// header; nil is Credential. It is asked only when a token or JWT
	// keys are configured.
	Credential func(*http.Request) (string, error)
	// Texts are the face's words for the refusals, where its clients
	// expect their own (gptme's on REST); empty ones are the layer's.
	Texts AuthTexts
	// Refused is the code of the auth command's refusal; "" is
	// Unauthorized.
	Refused fault.Code
}

// AuthTexts are the messages of Identify's refusals.
type AuthTexts struct {
	// Missing: no credential where one is needed.
	Missing string
	// Invalid: a credential that is not the shared token.
	Invalid string
	// NotJWT: a credential that is not a JWT, where only JWTs are taken.
	NotJWT string
}

// textOr is msg, or def when the face gave none.
func textOr(msg, def string) string {
	if msg != "" {
		return msg
	}
	return def
}

// Identify authenticates a request: a JWT when the server verifies them
// (Config.Tokens) and the credential is one, else the shared token; then
// the auth command, when configured, has its say. With neither a token
// nor JWT keys configured everyone is let in (a loopback server; the
// configuration refuses that anywhere else). The error is an
// Unauthorized *fault.Error whose message says what was wrong.
func (s *Server) Identify(ctx context.Context, r *http.Request, o IdentifyOptions) (Principal, error) {
	var cred string
	if s.cfg.Tokens != nil || o.Token != "" || o.RequireJWT {
		read := o.Credential
		if read == nil {
			read = func(r *http.Request) (string, error) { return Credential(r), nil }
		}
		var err error
		if cred, err = read(r); err != nil {
			return Principal{}, err
		}
	}
	t := o.Texts
	var p Principal
	switch {
	case s.cfg.Tokens != nil && jwtauth.LooksLikeJWT(cred):
		c, err := s.cfg.Tokens.Verify(cred)
		if err != nil {
			s.log.Info("token refused", "transport", o.Transport, "remote", r.RemoteAddr, "reason", err.Error())
			return Principal{}, fault.Wrap(fault.Unauthorized, err, "Invalid or expired token: "+err.Error())
		}
		p = Principal{Subject: c.Subject, Scoped: true, Sessions: c.Sessions}
	case o.RequireJWT:
		if cred == "" {
			return Principal{}, fault.New(fault.Unauthorized, "Missing authorization token: present a JWT as Authorization: Bearer <token> or ?token=")
		}
		return Principal{}, fault.New(fault.Unauthorized, "Invalid or expired token: this endpoint takes a JWT")
	case o.Token != "":
		if cred == "" {
			return Principal{}, fault.New(fault.Unauthorized, textOr(t.Missing, "Missing authorization token"))
		}
		if subtle.ConstantTimeCompare([]byte(cred), []byte(o.Token)) != 1 {
			return Principal{}, fault.New(fault.Unauthorized, textOr(t.Invalid, "Invalid token"))
		}
	case s.cfg.Tokens != nil:
		if cred == "" {
			return Principal{}, fault.New(fault.Unauthorized, textOr(t.Missing, "Missing authorization token"))
		}
		return Principal{}, fault.New(fault.Unauthorized, textOr(t.NotJWT, "Invalid token: not a JWT"))
	}
	res := s.Authenticate(ctx, RequestOf(o.Transport, r))
	if !res.Allowed {
		code := o.Refused
		if code == "" {
			code = fault.Unauthorized
		}
		return Principal{}, fault.New(code, res.Reason)
	}
	if p.Subject == "" {
		p.Subject = res.Identity
	}
	return p, nil
}

// VerifiesJWT reports whether the server accepts JWTs.
func (s *Server) VerifiesJWT() bool { return s.cfg.Tokens != nil }

// SessionFor is Session for a principal: a session p may not see is not
// found, exactly as one that does not exist, so that existence does not
// leak; and it is not loaded to find that out.
func (s *Server) SessionFor(ctx context.Context, id string, p Principal) (*Hosted, error) {
	if !s.Visible(id, p) {
		return nil, fault.Errorf(fault.NotFound, "Session %s not found", id)
	}
	h, err := s.Session(ctx, id)
	if err != nil {
		return nil, err
	}
	if !p.MaySee(id, h.owner) {
		return nil, fault.Errorf(fault.NotFound, "Session %s not found", id)
	}
	return h, nil
}

// Visible reports whether session id exists (loaded, being made, or
// known from before a restart) and p may see it, without loading it.
func (s *Server) Visible(id string, p Principal) bool {
	if !p.Scoped {
		return true
	}
	s.mu.RLock()
	h, loaded := s.sessions[id]
	s.mu.RUnlock()
	switch {
	case h != nil:
		return p.MaySee(id, h.owner)
	case loaded:
		// Being made: its owner is not known yet; SessionFor checks
		// again once it is.
		return true
	}
	e, ok := s.index.get(id)
	if !ok && s.cl != nil {
		return s.cl.visible(id, p) // made on another node of the cluster
	}
	return ok && !e.Deleted && p.MaySee(id, e.Owner)
}
