package pipeline

import (
	"encoding/json"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// The journal's own record format, on disk (FileJournal) and in a
// cluster's journal stream: a journal line is a Record as encoded here.
// Its field names are the journal's, fixed since JournalSchemaVersion 1
// (testdata/journal-v1.jsonl is a file written then): a journal written
// by one agentd is read by the next. No face's wire uses these types; a
// face has wire types of its own.

// journalRecord is a Record as the journal stores it.
type journalRecord struct {
	Op          string           `json:"op"`
	Command     string           `json:"command"`
	ID          string           `json:"id,omitempty"`
	Scope       string           `json:"scope,omitempty"`
	Key         string           `json:"key,omitempty"`
	Fingerprint string           `json:"fp"`
	Response    *journalResponse `json:"response,omitempty"`
	At          time.Time        `json:"at"`
	KeyExpires  time.Time        `json:"keyExpires,omitzero"`
	Expires     time.Time        `json:"expires"`
	Recovered   bool             `json:"recovered,omitempty"`
}

// journalResponse is a Response as the journal stores it.
type journalResponse struct {
	ID             string          `json:"id,omitempty"`
	Command        string          `json:"command"`
	Success        bool            `json:"success"`
	Data           json.RawMessage `json:"data,omitempty"`
	Err            *fault.Error    `json:"error,omitempty"`
	SessionVersion *int            `json:"sessionVersion,omitempty"`
	Replayed       bool            `json:"replayed,omitempty"`
	TimedOut       bool            `json:"timedOut,omitempty"`
	DataDropped    bool            `json:"dataDropped,omitempty"`
}

// MarshalRecord is r as a journal stores it (one line, without the
// newline). Interrupted is not stored: it says when a record was
// recovered, which the next opening of the journal decides anew.
func MarshalRecord(r *Record) ([]byte, error) {
	jr := journalRecord{Op: r.Op, Command: r.Command, ID: r.ID, Scope: r.Scope, Key: r.Key, Fingerprint: r.Fingerprint,
		At: r.At, KeyExpires: r.KeyExpires, Expires: r.Expires, Recovered: r.Recovered}
	if s := r.Response; s != nil {
		jr.Response = &journalResponse{ID: s.ID, Command: s.Command, Success: s.Success, Data: s.Data, Err: s.Err,
			SessionVersion: s.SessionVersion, Replayed: s.Replayed, TimedOut: s.TimedOut, DataDropped: s.DataDropped}
	}
	return json.Marshal(&jr)
}

// UnmarshalRecord reads a record MarshalRecord made into r.
func UnmarshalRecord(b []byte, r *Record) error {
	var jr journalRecord
	if err := json.Unmarshal(b, &jr); err != nil {
		return err
	}
	*r = Record{Op: jr.Op, Command: jr.Command, ID: jr.ID, Scope: jr.Scope, Key: jr.Key, Fingerprint: jr.Fingerprint,
		At: jr.At, KeyExpires: jr.KeyExpires, Expires: jr.Expires, Recovered: jr.Recovered}
	if s := jr.Response; s != nil {
		r.Response = &Response{ID: s.ID, Command: s.Command, Success: s.Success, Data: s.Data, Err: s.Err,
			SessionVersion: s.SessionVersion, Replayed: s.Replayed, TimedOut: s.TimedOut, DataDropped: s.DataDropped}
	}
	return nil
}
