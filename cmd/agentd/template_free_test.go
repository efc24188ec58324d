package main

import (
	"debug/elf"
	"strings"
	"testing"
)

// TestLinksNoTextTemplate: the agentd binary links neither text/template
// nor html/template. text/template calls methods by name through
// reflect, which makes the linker keep every exported method of every
// reachable type: 27.7 MB of agentd's binary (100.9 MB with it, 73.2 MB
// without), paged in at every start, besides html/template's package
// init. A package that needs a template writes its output itself (see
// transcript's HTML export).
func TestLinksNoTextTemplate(t *testing.T) {
	f, err := elf.Open(agentdBin)
	if err != nil {
		t.Skipf("the binary is not ELF here: %v", err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Skipf("the binary has no symbol table (built with -s?): %v", err)
	}
	var found []string
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "text/template.") || strings.HasPrefix(s.Name, "html/template.") {
			found = append(found, s.Name)
			if len(found) == 5 {
				break
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("agentd links text/template or html/template (%s, ...): find the importer with `go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/agentd | grep template` and write its output without a template", strings.Join(found, ", "))
	}
}
