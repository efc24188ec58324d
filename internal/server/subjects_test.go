package server

import "testing"

func TestSubjectCounts(t *testing.T) {
	s := SubjectCounts{Max: 2}
	steps := []struct {
		op      string // "admit" or "leave"
		subject string
		want    bool // admit's answer
	}{
		{"admit", "alice", true},
		{"admit", "alice", true},
		{"admit", "alice", false}, // at her limit
		{"admit", "bob", true},    // another subject is not
		{"admit", "", true},       // no subject: not counted
		{"admit", "", true},
		{"admit", "", true},
		{"leave", "alice", false},
		{"admit", "alice", true}, // a slot freed
		{"admit", "alice", false},
		{"leave", "", false}, // leaving without a subject frees nothing
		{"admit", "alice", false},
	}
	for i, st := range steps {
		switch st.op {
		case "admit":
			if got := s.Admit(st.subject); got != st.want {
				t.Fatalf("step %d: Admit(%q) = %v, want %v", i, st.subject, got, st.want)
			}
		case "leave":
			s.Leave(st.subject)
		}
	}
	s.Leave("bob")
	s.Leave("alice")
	s.Leave("alice")
	if s.Held("alice") != 0 || s.Held("bob") != 0 || len(s.by) != 0 {
		t.Errorf("counts left after every subject left: %v", s.by)
	}
}
