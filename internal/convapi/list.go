package convapi

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/server"
)

// listConversations serves GET /api/v2/conversations: the loaded
// conversations and those known from before a restart, most recently
// active first; a bare list (with a weak ETag), or a page with a cursor.
func (s *Server) listConversations(w http.ResponseWriter, r *http.Request, _ params) error {
	q := r.URL.Query()
	limit := 100
	if v, ok := q["limit"]; ok {
		n, err := atoi(v[0])
		if err != nil {
			return fault.New(fault.Invalid, "limit must be an integer")
		}
		if n <= 0 {
			return fault.New(fault.Invalid, "limit must be a positive integer")
		}
		limit = min(n, 1000)
	}
	search := q.Get("search")
	if v, ok := q["q"]; ok {
		search = v[0]
	}
	search = strings.ToLower(strings.TrimSpace(search))
	paginated := truthy(q, "paginated")
	var curMod float64
	var curID string
	hasCursor := false
	if c := q.Get("cursor"); c != "" {
		var err error
		if curMod, curID, err = parseCursor(c); err != nil {
			return fault.New(fault.Invalid, "cursor must be a numeric Unix timestamp or opaque cursor token")
		}
		hasCursor = true
	}

	all := s.summaries(principalOf(r.Context()))
	sort.Slice(all, func(i, j int) bool {
		if all[i].Modified != all[j].Modified {
			return all[i].Modified > all[j].Modified
		}
		return all[i].ID > all[j].ID
	})
	var list []ConversationSummary
	for _, c := range all {
		if search != "" && !strings.Contains(strings.ToLower(c.Name), search) && !strings.Contains(strings.ToLower(c.ID), search) &&
			(c.LastMessagePreview == nil || !strings.Contains(strings.ToLower(*c.LastMessagePreview), search)) {
			continue
		}
		if hasCursor && (c.Modified > curMod || (c.Modified == curMod && (curID == "" || c.ID >= curID))) {
			continue
		}
		list = append(list, c)
	}
	if list == nil {
		list = []ConversationSummary{}
	}
	if paginated {
		page := ConversationPage{Conversations: list}
		if len(list) > limit {
			page.Conversations = list[:limit]
			last := list[limit-1]
			next := strconv.FormatFloat(last.Modified, 'g', 17, 64) + "|" + url.PathEscape(last.ID)
			page.NextCursor = &next
		}
		writeJSON(w, http.StatusOK, page)
		return nil
	}
	if len(list) > limit {
		list = list[:limit]
	}
	etag := listETag(list)
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func truthy(q url.Values, k string) bool {
	v, ok := q[k]
	if !ok {
		return false
	}
	switch strings.ToLower(v[0]) {
	case "", "1", "true", "yes":
		return true
	}
	return false
}

// parseCursor reads "<modified>|<escaped id>", or a bare timestamp.
func parseCursor(c string) (float64, string, error) {
	mod, id, hasID := strings.Cut(c, "|")
	f, err := strconv.ParseFloat(mod, 64)
	if err != nil {
		return 0, "", err
	}
	if !hasID {
		return f, "", nil
	}
	if id, err = url.PathUnescape(id); err != nil || id == "" {
		return 0, "", strconv.ErrSyntax
	}
	return f, id, nil
}

func listETag(list []ConversationSummary) string {
	h := sha256.New()
	for _, c := range list {
		h.Write([]byte(c.ID + "\x00" + strconv.FormatFloat(c.Modified, 'g', -1, 64) + "\x00" + strconv.Itoa(c.Messages) + "\x00" + c.Name + "\x00"))
	}
	return `W/"` + hex.EncodeToString(h.Sum(nil)[:12]) + `"`
}

// sha is a short hex digest of s.
func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == strings.TrimPrefix(etag, "W/") {
			return true
		}
	}
	return false
}

// summaries describes every conversation the server knows that who may
// see.
func (s *Server) summaries(who server.Principal) []ConversationSummary {
	var out []ConversationSummary
	for _, h := range s.srv.Sessions() {
		if !who.MaySee(h.ID(), h.Owner()) {
			continue
		}
		sess := h.Session()
		msgs := sess.Messages()
		created := float64(h.Created().UnixMilli()) / 1000
		modified := created
		var preview *string
		for i := len(msgs) - 1; i >= 0; i-- {
			m := msgs[i]
			if m.Role == llm.RoleUser || m.Role == llm.RoleAssistant {
				if modified == created && m.Timestamp > 0 {
					modified = float64(m.Timestamp) / 1000
				}
				if p := clip(strings.TrimSpace(contentText(m.Content)), 200); p != "" {
					preview = &p
					break
				}
			}
		}
		model := modelName(sess.Model())
		name := sess.Name()
		if name == "" {
			name = h.ID()
		}
		out = append(out, ConversationSummary{ID: h.ID(), Name: name, Path: sess.File(), Created: created, Modified: modified,
			Messages: len(msgs), MessageCount: len(msgs), LastUpdated: modified, Branches: 1, Workspace: h.Cwd(),
			Model: &model, LastMessagePreview: preview, Loaded: true, Generating: sess.Running()})
	}
	for _, k := range s.srv.KnownSessions() {
		if !who.MaySee(k.ID, k.Owner) {
			continue
		}
		created := float64(k.Created.UnixMilli()) / 1000
		modified := created
		if !k.Info.Modified.IsZero() {
			modified = float64(k.Info.Modified.UnixMilli()) / 1000
		}
		name := k.Info.Name
		if name == "" {
			name = k.ID
		}
		var preview *string
		if p := clip(k.Info.FirstMessage, 200); p != "" {
			preview = &p
		}
		out = append(out, ConversationSummary{ID: k.ID, Name: name, Path: k.File, Created: created, Modified: modified,
			Messages: k.Info.MessageCount, MessageCount: k.Info.MessageCount, LastUpdated: modified, Branches: 1, Workspace: k.Cwd,
			LastMessagePreview: preview})
	}
	return out
}
