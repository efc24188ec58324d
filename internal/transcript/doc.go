// Package transcript reads and writes session files in pi's JSONL format
// (version 3), so that agentd and pi can open each other's sessions.
//
// A session file is a header line followed by entries, one JSON object per
// line. Entries form a tree through id/parentId; the leaf is the current
// position and appending adds a child of it. Context turns the path to a
// leaf into the messages an agent sends, by pi's rules for compactions,
// branch summaries and extension messages.
//
// # Compatibility with pi 0.73.1
//
// Lines are written in pi's field order (its object-literal order, which
// for custom and custom_message entries puts customType before the id),
// ids are pi's (8 hex digits for entries, UUIDv7 for sessions), timestamps
// are JavaScript's toISOString, and files live where pi puts them
// (SessionDir, named <timestamp>_<uuid>.jsonl). Decoding a line pi wrote
// and encoding it again gives the same bytes (checked on every line of a
// session pi 0.73.1 wrote, and by having pi's SessionManager read files
// agentd wrote; see TestPiOpensAgentdFiles). Entry types agentd does not
// know, and known entries whose body it cannot represent, are kept as read
// and written back unchanged.
//
// Where agentd differs, and why:
//
//   - When the file is written. pi holds a new session in memory until the
//     first assistant message arrives, so a crash before the model answers
//     loses the user's prompt. agentd creates the file with the first
//     append (header and entry in one write) and fsyncs conversation
//     entries as they come. A side effect: pi 0.73.1, opening a file that
//     has no assistant message yet and continuing it, writes the file's
//     lines again when its first answer arrives (a pi bug, also hit by its
//     own forkFrom). The copy is harmless (same ids) and agentd's Open
//     drops it.
//   - When repairs happen. pi rewrites a v1/v2 file as soon as it loads it;
//     agentd migrates in memory at Open and rewrites (atomically, via a
//     temporary file and rename) on the first append, so listing and
//     exporting never modify a file. Either way the ids a v1 migration
//     invents are on disk before anything refers to them.
//   - Torn lines. pi skips every line JSON.parse rejects and appends after
//     whatever is there, so an append after a crash-torn line is glued to
//     the fragment and lost on the next load. agentd skips garbled lines
//     in the middle with a warning (an error under WithStrict) and cuts a
//     torn tail off before its next append.
//   - A file without a valid header. pi silently starts a new session
//     over it, discarding the content; Open returns ErrNoHeader instead.
//   - Files are created 0600 and directories 0700 (pi: 0666/0777 less the
//     umask): sessions hold everything the user and their tools said.
//   - Known entries are re-encoded from their fields when copied into a
//     fork, a clone or a migrated file, so fields pi does not define (in pi
//     0.73.1's own output only partialArgs/streamIndex, streaming leftovers
//     on aborted tool calls) are not carried over, and a user message's
//     string content becomes a one-block array (a custom_message's stays a
//     string). Strings are written with U+2028/U+2029 escaped, which
//     JSON.stringify leaves raw; both read the same.
//   - agentd refuses to append entries with invalid caller-supplied JSON
//     (tool-call arguments, details, data), which would make the line
//     unreadable; pi cannot produce them.
//
// One process should append to a session file at a time (pi has the same
// rule): a File assumes the bytes after the last line it knows of are its
// own, so it can cut off a fragment its failed write left behind.
package transcript
