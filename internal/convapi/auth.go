package convapi

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/jwtauth"
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
			return "", errorf(http.StatusUnauthorized, "Invalid authorization header format")
		}
		if !strings.EqualFold(scheme, "Bearer") {
			return "", errorf(http.StatusUnauthorized, "Invalid authentication scheme")
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

// authorize checks a request's credentials and says who it acts for.
//
// A JWT (when the server verifies them) is checked by the layer, as on
// the other faces: its subject owns the conversations it creates and it
// sees only those and the ones its sessions claim grants. The shared
// token, compared in constant time, and a loopback server with neither a
// token nor JWT keys reach every conversation. With JWT keys and no
// shared token, a JWT is required. Then the operator's auth command, when
// there is one, has its say.
func (s *Server) authorize(r *http.Request) (server.Principal, error) {
	jwts := s.srv.VerifiesJWT()
	var cred string
	if jwts || s.opt.Token != "" {
		var err error
		if cred, err = credential(r); err != nil {
			return server.Principal{}, err
		}
	}
	switch {
	case jwts && jwtauth.LooksLikeJWT(cred):
		return s.identifyJWT(r, cred)
	case s.opt.Token != "":
		if cred == "" {
			return server.Principal{}, errorf(http.StatusUnauthorized, "Missing authentication credentials")
		}
		if subtle.ConstantTimeCompare([]byte(cred), []byte(s.opt.Token)) != 1 {
			return server.Principal{}, errorf(http.StatusUnauthorized, "Invalid or expired token")
		}
	case jwts:
		if cred == "" {
			return server.Principal{}, errorf(http.StatusUnauthorized, "Missing authentication credentials")
		}
		return server.Principal{}, errorf(http.StatusUnauthorized, "Invalid or expired token: this server takes a JWT")
	}
	res := s.srv.Authenticate(r.Context(), server.RequestOf("http", r))
	if !res.Allowed {
		return server.Principal{}, errorf(http.StatusForbidden, res.Reason)
	}
	return server.Principal{Subject: res.Identity}, nil
}

// identifyJWT has the layer verify a JWT, wherever the request carried
// it (the cookie included, which the layer does not read).
func (s *Server) identifyJWT(r *http.Request, cred string) (server.Principal, error) {
	rr := r.Clone(r.Context())
	rr.Header.Set("Authorization", "Bearer "+cred)
	who, err := s.srv.Identify(r.Context(), rr, server.IdentifyOptions{Transport: "http"})
	if err != nil {
		msg := "Invalid or expired token"
		if fe := fault.As(err); fe != nil && fe.Message != "" {
			msg = fe.Message
		}
		return server.Principal{}, errorf(http.StatusUnauthorized, msg)
	}
	return who, nil
}

// sees reports whether the request's principal may see conversation id
// (for what names one without loading it: attachments).
func (s *Server) sees(ctx context.Context, id string) bool {
	return s.srv.Visible(id, principalOf(ctx))
}
