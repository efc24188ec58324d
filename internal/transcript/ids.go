package transcript

import (
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"strings"
	"time"
)

// isoLayout is JavaScript's Date#toISOString: always UTC, always three
// fractional digits. Entry and header timestamps use it so that pi parses
// them with new Date() and sorts them the same way.
const isoLayout = "2006-01-02T15:04:05.000Z"

func formatISO(t time.Time) string { return t.UTC().Format(isoLayout) }

// parseISO reads the timestamps pi and agentd write, and tolerates the other
// RFC 3339 forms a hand-edited file might hold.
func parseISO(s string) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// newSessionID returns a UUIDv7 as pi's session ids are: the leading 48
// bits are the Unix time in milliseconds, so ids sort by creation time.
func newSessionID(now time.Time) string {
	var u [16]byte
	_, _ = rand.Read(u[6:]) // crypto/rand.Read never fails (Go 1.24+)
	ms := uint64(now.UnixMilli())
	u[0], u[1], u[2] = byte(ms>>40), byte(ms>>32), byte(ms>>24)
	u[3], u[4], u[5] = byte(ms>>16), byte(ms>>8), byte(ms)
	u[6] = u[6]&0x0f | 0x70 // version 7
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}

// newEntryID returns an 8-hex-digit id not yet taken. pi uses the first
// eight characters of a random UUID; 32 random bits collide rarely enough
// that the retry loop is insurance, and like pi we fall back to a longer
// id rather than fail.
func newEntryID(taken func(string) bool) string {
	var b [4]byte
	for range 100 {
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		if !taken(id) {
			return id
		}
	}
	var long [16]byte
	_, _ = rand.Read(long[:])
	return hex.EncodeToString(long[:])
}

// SessionDir is the directory pi keeps the sessions of cwd in under the
// sessions root (pi's ~/.pi/agent/sessions): "--" + cwd without its
// leading separator, with every '/', '\' and ':' turned into '-', + "--".
// agentd uses the same layout so that pi's /resume finds agentd's sessions
// and the other way round.
func SessionDir(root, cwd string) string {
	s := cwd
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, `\`) {
		s = s[1:]
	}
	s = strings.NewReplacer("/", "-", `\`, "-", ":", "-").Replace(s)
	return filepath.Join(root, "--"+s+"--")
}

// fileName is pi's session file name: the header timestamp with ':' and
// '.' replaced by '-' (2026-11-22T08-49-39-687Z), '_', the session id.
func fileName(timestamp, id string) string {
	return strings.NewReplacer(":", "-", ".", "-").Replace(timestamp) + "_" + id + ".jsonl"
}
