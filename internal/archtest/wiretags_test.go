package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// wireless are shared packages whose exported types speak no wire: every
// face (and the cluster, and the journal) maps them to a wire of its own,
// declared where it is written, so a face's field names cannot leak into
// another face or into a durable format by way of the shared type.
var wireless = []string{"internal/pipeline"}

// TestSharedTypesCarryNoWireNames fails when an exported struct type of a
// wireless package has a json tag: its JSON names would be whatever wire
// marshals it first. Unexported types (a journal's own records) may.
func TestSharedTypesCarryNoWireNames(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range wireless {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("the files of %s: %v", dir, err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, s := range gd.Specs {
					ts := s.(*ast.TypeSpec)
					if !ts.Name.IsExported() {
						continue
					}
					ast.Inspect(ts.Type, func(n ast.Node) bool {
						fld, ok := n.(*ast.Field)
						if !ok || fld.Tag == nil {
							return true
						}
						tag, _ := strconv.Unquote(fld.Tag.Value)
						if _, has := reflect.StructTag(tag).Lookup("json"); has {
							t.Errorf("%s: exported type %s.%s has a json tag (%s): give the wire that writes it a type of its own",
								fset.Position(fld.Pos()), filepath.Base(dir), ts.Name.Name, fld.Tag.Value)
						}
						return true
					})
				}
			}
		}
	}
}
