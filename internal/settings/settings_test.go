package settings

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUpdateKeepsUnknownKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	if err := os.WriteFile(path, []byte(`{"theme":"dark","compaction":{"reserveTokens":8192,"custom":1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Get().Compaction; got == nil || *got.ReserveTokens != 8192 {
		t.Fatalf("compaction %+v", got)
	}
	if err := st.Update(func(s *Settings) {
		s.SteeringMode = "all"
		s.Compaction.Enabled = Ptr(false)
		s.Retry = &Retry{Enabled: Ptr(false)}
	}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	for _, want := range []string{`"theme": "dark"`, `"steeringMode": "all"`, `"custom": 1`, `"enabled": false`, `"reserveTokens": 8192`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("settings file lacks %s:\n%s", want, data)
		}
	}
	again, err := Open(path)
	if err != nil || again.Get().SteeringMode != "all" || Bool(again.Get().Retry.Enabled, true) {
		t.Fatalf("reopened %+v %v", again.Get(), err)
	}
}

func TestMissingAndMalformed(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(filepath.Join(dir, "none.json"))
	if err != nil || st.Get().DefaultModel != "" {
		t.Fatalf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"steeringMode": `), 0o600)
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("malformed file: %v", err)
	}
	wrong := filepath.Join(dir, "wrong.json")
	_ = os.WriteFile(wrong, []byte(`{"retry": {"enabled": "yes"}}`), 0o600)
	if _, err := Open(wrong); err == nil {
		t.Fatal("wrong type accepted")
	}
}
