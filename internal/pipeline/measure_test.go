package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The scenario of issue 9: 60 get_messages on a session holding two large
// images, each answer about 18 MB.
const (
	largeAnswers   = 60
	largeImageB64  = 9 << 20 // base64 characters per image
	restartProbeOK = "restart-probe"
)

// imagesRegistry answers get_messages with two images, freshly built on
// every call as the session would. The image is made on first use, so a
// start that runs nothing does not pay for it.
func imagesRegistry() Registry {
	image := sync.OnceValue(func() string {
		raw := make([]byte, largeImageB64/4*3)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		return base64.StdEncoding.EncodeToString(raw)
	})
	return Registry{"get_messages": {Class: ClassRead, Lane: LaneServer, ReadOnly: true,
		Run: func(context.Context, Command) (json.RawMessage, error) {
			img := image()
			var b bytes.Buffer
			b.Grow(2*len(img) + 256)
			b.WriteString(`{"messages":[{"role":"user","content":[`)
			for i := range 2 {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(`{"type":"image","data":"`)
				b.WriteString(img)
				b.WriteString(`","mimeType":"image/png"}`)
			}
			b.WriteString(`]}]}`)
			return b.Bytes(), nil
		}}}
}

// BenchmarkLargeOutcomes measures what 60 large reads with ids leave
// behind: the journal's size, the growth of the live heap, and what the next
// start costs (time and peak RSS of a fresh process that opens the journal
// and builds a pipeline). Run it once:
//
//	go test -run '^$' -bench LargeOutcomes -benchtime 1x ./pipeline/
func BenchmarkLargeOutcomes(b *testing.B) {
	for b.Loop() {
		dir := b.TempDir()
		path := filepath.Join(dir, "journal.jsonl")
		j, err := OpenFileJournal(path)
		if err != nil {
			b.Fatal(err)
		}
		p, err := New(Options{Registry: imagesRegistry(), Journal: j})
		if err != nil {
			b.Fatal(err)
		}
		// The first read makes the fake session's images; what the
		// pipeline keeps is measured from here.
		p.Do(Command{Type: "get_messages"})
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range largeAnswers {
			r := p.Do(Command{Type: "get_messages", ID: fmt.Sprint("m", i)})
			if !r.Success || len(r.Data) < 2*largeImageB64 {
				b.Fatalf("answer %d: %v, %d bytes", i, r.Success, len(r.Data))
			}
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fi, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(fi.Size())/1e6, "journal-MB")
		b.ReportMetric((float64(ms.HeapAlloc)-float64(before.HeapAlloc))/(1<<20), "heap-growth-MiB")
		runtime.KeepAlive(p)
		p.Close()
		j.Close()

		out, err := exec.Command(os.Args[0], "-test.run=^TestRestartProbe$", "--", restartProbeOK, path).CombinedOutput()
		if err != nil {
			b.Fatalf("restart probe: %v\n%s", err, out)
		}
		probe := map[string]float64{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "PROBE "); ok {
				for _, kv := range strings.Fields(rest) {
					k, v, _ := strings.Cut(kv, "=")
					probe[k], _ = strconv.ParseFloat(v, 64)
				}
			}
		}
		if len(probe) == 0 {
			b.Fatalf("restart probe said nothing:\n%s", out)
		}
		b.ReportMetric(probe["ms"], "restart-ms")
		b.ReportMetric(probe["hwm-kb"]/1024, "restart-peak-RSS-MiB")
		b.ReportMetric(probe["heap-kb"]/1024, "restart-heap-MiB")
	}
}

// TestRestartProbe is the next start of BenchmarkLargeOutcomes, run in a
// process of its own so its peak RSS is its own; it does nothing in a
// normal test run.
func TestRestartProbe(t *testing.T) {
	if flag.Arg(0) != restartProbeOK {
		t.Skip("run by BenchmarkLargeOutcomes")
	}
	start := time.Now()
	j, err := OpenFileJournal(flag.Arg(1))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	p, err := New(Options{Registry: imagesRegistry(), Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	elapsed := time.Since(start)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc: peak RSS unknown")
	}
	var hwm string
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			hwm = strings.TrimSuffix(strings.TrimSpace(v), " kB")
		}
	}
	fmt.Printf("PROBE ms=%d hwm-kb=%s heap-kb=%d\n", elapsed.Milliseconds(), hwm, ms.HeapAlloc/1024)
}
