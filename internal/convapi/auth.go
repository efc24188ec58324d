package convapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/server"
)

// cookieName is the HttpOnly cookie POST /api/v2/auth/cookie sets.
const cookieName = "agentd_token"

// principalKey keys the request's principal in its context, and in the
// context of the pipeline command it submits.
type principalKey struct{}

func withPrincipal(ctx context.Context, p server.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// principalOf is who a request or command acts for. A context without
// one (a command replayed from the journal after a restart, which has no
// request behind it) acts for the server, as pi-server's replays do.
func principalOf(ctx context.Context) server.Principal {
	p, _ := ctx.Value(principalKey{}).(server.Principal)
	return p
}

// credential is what a request presents: Authorization: Bearer, the
// cookie, ?token=, in that order (gptme's). A malformed Authorization
// header is an error of its own, in gptme's words.
func credential(r *http.Request) (string, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
		if !ok {
			return "", fault.New(fault.Unauthorized, "Invalid authorization header format")
		}
		if !strings.EqualFold(scheme, "Bearer") {
			return "", fault.New(fault.Unauthorized, "Invalid authentication scheme")
		}
		if got := strings.TrimSpace(rest); got != "" {
			return got, nil
		}
	}
	if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
		return c.Value, nil
	}
	return r.URL.Query().Get("token"), nil
}

// gptmeAuthTexts are gptme's words for the layer's refusals, which its
// clients and portable suite read.
var gptmeAuthTexts = server.AuthTexts{
	Missing: "Missing authentication credentials",
	Invalid: "Invalid or expired token",
	NotJWT:  "Invalid or expired token: this server takes a JWT",
}

// authorize checks a request's credentials and says who it acts for,
// by the layer's rule (server.Identify), as on the other faces, with
// what this face reads (credential) and gptme's words.
//
// A JWT (when the server verifies them) makes its subject the owner of
// the conversations it creates, and it sees only those and the ones its
// claims grant. The shared token, compared in constant time, and a
// loopback server with neither a token nor JWT keys reach every
// conversation. With JWT keys and no shared token, a JWT is required.
// Then the operator's auth command, when there is one, has its say; its
// refusal is a 403 here.
func (s *Server) authorize(r *http.Request) (server.Principal, error) {
	return s.srv.Identify(r.Context(), r, server.IdentifyOptions{Token: s.opt.Token, Transport: "http",
		Credential: credential, Texts: gptmeAuthTexts, Refused: fault.Forbidden})
}

// sees reports whether the request's principal may see conversation id
// (for what names one without loading it: attachments).
func (s *Server) sees(ctx context.Context, id string) bool {
	return s.srv.Visible(id, principalOf(ctx))
}
