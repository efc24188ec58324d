package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkSnapshot: a workspace of 2000 files of 4 KiB in 40
// directories, snapshotted the first time (every file read and stored)
// and again unchanged (sizes, times and inodes match: nothing read).
func BenchmarkSnapshot(b *testing.B) {
	ws := b.TempDir()
	body := strings.Repeat("x", 4095) + "\n"
	for i := range 2000 {
		p := filepath.Join(ws, fmt.Sprintf("d%02d", i%40), fmt.Sprintf("f%04d.txt", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(fmt.Sprint(i)+body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			st, err := Open(b.TempDir(), ws, Limits{})
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := st.Snapshot(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unchanged", func(b *testing.B) {
		st, err := Open(b.TempDir(), ws, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		st.Snapshot(ctx)
		for b.Loop() {
			if _, _, err := st.Snapshot(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
