package main

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// initCost is what package initialisation allocated, from
// GODEBUG=inittrace=1's lines: "init PKG @T ms, C ms clock, B bytes, A allocs".
type initCost struct{ bytes, allocs int64 }

// parseInitTrace sums the trace by owner: agentd's own packages, and
// everything (agentd's, the standard library's and the dependencies').
func parseInitTrace(t *testing.T, trace string) (own, all initCost, lines int) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(trace))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 11 || f[0] != "init" || f[8] != "bytes," || f[10] != "allocs" {
			continue
		}
		b, err1 := strconv.ParseInt(f[7], 10, 64)
		a, err2 := strconv.ParseInt(f[9], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("inittrace line %q: %v %v", sc.Text(), err1, err2)
		}
		lines++
		all.bytes += b
		all.allocs += a
		if strings.HasPrefix(f[1], "github.com/agentd-dev/agentd/") {
			own.bytes += b
			own.allocs += a
		}
	}
	return own, all, lines
}

// TestInitBudget: starting agentd allocates no more than its budget.
// Allocation counts do not depend on the machine's load, so they can be
// asserted where timings cannot. agentd's own packages build nothing at
// init that a command may not use (regexps, templates, schemas and maps
// are made on first use). The whole budget is what the dependencies
// allocate in their init functions, which a single binary cannot skip
// (nats-server's tables, jsonschema-go's, the YAML and JSON libraries'),
// with a margin of about 10 %: a dependency that grows past it fails
// here the day it is updated. (The provider SDKs, openai-go's union
// registrations above all, the Prometheus client and gobwas/ws took a
// further 0.65 MB in 4,400 allocations until agentd's own code replaced
// them.)
func TestInitBudget(t *testing.T) {
	const (
		ownBytes, ownAllocs = 8 << 10, 120
		allBytes, allAllocs = 560 << 10, 4550
	)
	r := run(t, t.TempDir(), []string{"GODEBUG=inittrace=1"}, "", "version")
	if r.code != 0 {
		t.Fatalf("agentd version: exit %d\n%s", r.code, r.stderr)
	}
	own, all, lines := parseInitTrace(t, r.stderr)
	if lines < 50 {
		t.Fatalf("only %d inittrace lines; stderr:\n%s", lines, r.stderr)
	}
	t.Logf("init: agentd's packages %d bytes in %d allocations; all %d bytes in %d allocations (%d packages)",
		own.bytes, own.allocs, all.bytes, all.allocs, lines)
	if own.bytes > ownBytes || own.allocs > ownAllocs {
		t.Errorf("agentd's own packages allocate %d bytes in %d allocations at init; the budget is %d in %d: build it on first use (sync.OnceValue)",
			own.bytes, own.allocs, ownBytes, ownAllocs)
	}
	if all.bytes > allBytes || all.allocs > allAllocs {
		t.Errorf("init allocates %d bytes in %d allocations; the budget is %d in %d:\n%s",
			all.bytes, all.allocs, allBytes, allAllocs, heaviest(r.stderr))
	}
}

// heaviest lists the packages that allocate most at init.
func heaviest(trace string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(trace))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 11 && f[0] == "init" {
			if n, _ := strconv.Atoi(f[7]); n >= 20<<10 {
				fmt.Fprintf(&b, "  %s: %s bytes, %s allocs\n", f[1], f[7], f[9])
			}
		}
	}
	return b.String()
}

func TestParseInitTrace(t *testing.T) {
	trace := "init internal/bytealg @0.005 ms, 0 ms clock, 0 bytes, 0 allocs\n" +
		"init github.com/agentd-dev/agentd/internal/llm @31 ms, 0.076 ms clock, 32568 bytes, 128 allocs\n" +
		"init github.com/openai/openai-go/v3 @41 ms, 20 ms clock, 143360 bytes, 1057 allocs\n" +
		"agentd 1.0\n" +
		"init broken line\n"
	own, all, lines := parseInitTrace(t, trace)
	if lines != 3 || own != (initCost{32568, 128}) || all != (initCost{175928, 1185}) {
		t.Errorf("own %+v, all %+v, %d lines", own, all, lines)
	}
}
