package metrics

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The text exposition format 0.0.4, as rules a scraper holds output to.
// checkExposition applies them all; TestGrammarRules shows each one
// catching what it forbids, so a pass of real output means something.
var (
	nameRE   = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelRE  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	helpRE   = regexp.MustCompile(`^# HELP ([^ ]+) ((?:[^\\\n]|\\\\|\\n)*)$`)
	typeRE   = regexp.MustCompile(`^# TYPE ([^ ]+) (counter|gauge|histogram|summary|untyped)$`)
	sampleRE = regexp.MustCompile(`^([^{ ]+)(?:\{(.*)\})? ([^ ]+)(?: (-?[0-9]+))?$`)
	pairRE   = regexp.MustCompile(`^([^=",]+)="((?:[^\\"\n]|\\\\|\\"|\\n)*)"`)
)

// series is one histogram's or summary's samples.
type series struct {
	les      []float64
	counts   []float64
	sum      bool
	count    float64
	hasCount bool
}

// checkExposition parses text as the format and returns every rule it
// breaks.
func checkExposition(text string) []error {
	var errs []error
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("line %d: "+format, append([]any{line}, args...)...))
	}
	if text != "" && !strings.HasSuffix(text, "\n") {
		fail(0, "output does not end in a newline")
	}
	types := map[string]string{}
	helps := map[string]bool{}
	done := map[string]bool{} // families whose samples have ended
	seen := map[string]bool{} // series already written
	hist := map[string]*series{}
	current := ""
	family := func(name string) string {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				if t := types[base]; t == "histogram" || t == "summary" && suffix != "_bucket" {
					return base
				}
			}
		}
		return name
	}
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		n := i + 1
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "# HELP "):
			m := helpRE.FindStringSubmatch(line)
			if m == nil {
				fail(n, "HELP with a bad escape: %q", line)
				continue
			}
			if !nameRE.MatchString(m[1]) {
				fail(n, "HELP of an invalid name %q", m[1])
			}
			if helps[m[1]] {
				fail(n, "second HELP for %s", m[1])
			}
			helps[m[1]] = true
			continue
		case strings.HasPrefix(line, "# TYPE "):
			m := typeRE.FindStringSubmatch(line)
			if m == nil {
				fail(n, "TYPE line not `# TYPE name type`: %q", line)
				continue
			}
			if types[m[1]] != "" {
				fail(n, "second TYPE for %s", m[1])
			}
			if done[m[1]] || current == m[1] {
				fail(n, "TYPE of %s after its samples", m[1])
			}
			types[m[1]] = m[2]
			continue
		case strings.HasPrefix(line, "#"):
			continue
		}
		m := sampleRE.FindStringSubmatch(line)
		if m == nil {
			fail(n, "not a sample: %q", line)
			continue
		}
		name, labels, value := m[1], m[2], m[3]
		if !nameRE.MatchString(name) {
			fail(n, "invalid metric name %q", name)
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || strings.ContainsAny(value, "_xXpP") || value == "Inf" || value == "inf" {
			fail(n, "value %q is not a float", value)
		}
		var names, pairs []string
		le, quantile := "", ""
		for rest := labels; rest != ""; {
			p := pairRE.FindStringSubmatch(rest)
			if p == nil {
				fail(n, "bad label pair at %q", rest)
				break
			}
			if !labelRE.MatchString(p[1]) || strings.HasPrefix(p[1], "__") {
				fail(n, "invalid label name %q", p[1])
			}
			if slices.Contains(names, p[1]) {
				fail(n, "label %s twice", p[1])
			}
			names = append(names, p[1])
			switch p[1] {
			case "le":
				le = p[2]
			case "quantile":
				quantile = p[2]
			default:
				pairs = append(pairs, p[0])
			}
			rest = rest[len(p[0]):]
			if rest != "" {
				if rest[0] != ',' || rest == "," {
					fail(n, "labels not separated by one comma: %q", rest)
					break
				}
				rest = rest[1:]
			}
		}
		fam := family(name)
		if fam != current {
			if done[fam] {
				fail(n, "samples of %s not together", fam)
			}
			done[current] = true
			current = fam
		}
		key := name + "{" + labels + "}"
		if seen[key] {
			fail(n, "series %s twice", key)
		}
		seen[key] = true
		switch typ := types[fam]; typ {
		case "counter":
			if v < 0 || math.IsNaN(v) {
				fail(n, "counter %s is %v", name, v)
			}
		case "histogram", "summary":
			s := hist[fam+"{"+strings.Join(pairs, ",")+"}"]
			if s == nil {
				s = &series{}
				hist[fam+"{"+strings.Join(pairs, ",")+"}"] = s
			}
			switch {
			case name == fam+"_bucket" && typ == "histogram":
				b, err := strconv.ParseFloat(le, 64)
				if err != nil {
					fail(n, "bucket without a float le: %q", le)
				}
				if len(s.les) > 0 && b <= s.les[len(s.les)-1] {
					fail(n, "bucket le=%q not above the one before", le)
				}
				if len(s.counts) > 0 && v < s.counts[len(s.counts)-1] {
					fail(n, "bucket le=%q counts less than the one before", le)
				}
				s.les, s.counts = append(s.les, b), append(s.counts, v)
			case name == fam && typ == "summary":
				if q, err := strconv.ParseFloat(quantile, 64); err != nil || q < 0 || q > 1 {
					fail(n, "summary quantile %q not in [0, 1]", quantile)
				}
			case name == fam+"_sum":
				s.sum = true
			case name == fam+"_count":
				s.count, s.hasCount = v, true
			default:
				fail(n, "%s sample %s", typ, name)
			}
			if le != "" && name != fam+"_bucket" || quantile != "" && name != fam {
				fail(n, "le or quantile on %s", name)
			}
		}
	}
	keys := make([]string, 0, len(hist))
	for k := range hist {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s := hist[k]
		fam, _, _ := strings.Cut(k, "{")
		if !s.sum || !s.hasCount {
			fail(0, "%s lacks _sum or _count", k)
		}
		if types[fam] != "histogram" {
			continue
		}
		if len(s.les) == 0 || !math.IsInf(s.les[len(s.les)-1], 1) {
			fail(0, "%s has no +Inf bucket", k)
		} else if s.counts[len(s.counts)-1] != s.count {
			fail(0, "%s: +Inf bucket %v, _count %v", k, s.counts[len(s.counts)-1], s.count)
		}
	}
	return errs
}

// Each rule of the format, and output that breaks it.
func TestGrammarRules(t *testing.T) {
	const h = "# HELP h x\n# TYPE h histogram\n"
	tests := []struct{ rule, text string }{
		{"ends in a newline", "a 1"},
		{"metric name", "1a 1\n"},
		{"label name", `a{1b="x"} 1` + "\n"},
		{"reserved label name", `a{__x="x"} 1` + "\n"},
		{"label value escapes", `a{b="x\t"} 1` + "\n"},
		{"label value quote", `a{b="x"y"} 1` + "\n"},
		{"label twice", `a{b="x",b="y"} 1` + "\n"},
		{"label separator", `a{b="x" c="y"} 1` + "\n"},
		{"value", "a one\n"},
		{"value spelling", "a inf\n"},
		{"HELP escapes", "# HELP a x\\ty\n"},
		{"HELP once", "# HELP a x\n# HELP a y\n"},
		{"TYPE type", "# TYPE a meter\n"},
		{"TYPE once", "# TYPE a gauge\n# TYPE a gauge\n"},
		{"TYPE before samples", "a 1\n# TYPE a gauge\n"},
		{"family together", "a 1\nb 1\na{x=\"y\"} 1\n"},
		{"series once", "a 1\na 1\n"},
		{"counter not negative", "# TYPE c counter\nc -1\n"},
		{"buckets ascend", h + `h_bucket{le="2"} 1` + "\n" + `h_bucket{le="1"} 1` + "\n" + `h_bucket{le="+Inf"} 1` + "\nh_sum 1\nh_count 1\n"},
		{"buckets cumulative", h + `h_bucket{le="1"} 2` + "\n" + `h_bucket{le="+Inf"} 1` + "\nh_sum 1\nh_count 1\n"},
		{"+Inf bucket", h + `h_bucket{le="1"} 1` + "\nh_sum 1\nh_count 1\n"},
		{"_count is +Inf", h + `h_bucket{le="+Inf"} 1` + "\nh_sum 1\nh_count 2\n"},
		{"_sum", h + `h_bucket{le="+Inf"} 1` + "\nh_count 1\n"},
		{"le a float", h + `h_bucket{le="many"} 1` + "\n" + `h_bucket{le="+Inf"} 1` + "\nh_sum 1\nh_count 1\n"},
		{"quantile in [0, 1]", "# TYPE s summary\n" + `s{quantile="2"} 1` + "\ns_sum 1\ns_count 1\n"},
	}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			if errs := checkExposition(tc.text); len(errs) == 0 {
				t.Errorf("%q passed", tc.text)
			}
		})
	}
	good := h + `h_bucket{a="\\\"\n",le="1"} 1` + "\n" + `h_bucket{a="\\\"\n",le="+Inf"} 1` + "\n" +
		`h_sum{a="\\\"\n"} 0.5` + "\n" + `h_count{a="\\\"\n"} 1` + "\n" + "# HELP g a \\\\ b\\n\n# TYPE g gauge\ng NaN\ng{x=\"\"} +Inf\n"
	if errs := checkExposition(good); len(errs) > 0 {
		t.Errorf("well-formed output failed: %v", errs)
	}
}
