package convapi

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// components are the schemas under #/components/schemas: one per named
// struct type the document reaches, each referred to by $ref.
//
// jsonschema.ForType inlines every type it meets; the document keeps one
// named schema per type instead, so each type is inferred with every other
// named struct type given as a $ref (ForOptions.TypeSchemas). What
// jsonschema-go reads from a field is its json tag (name, omitempty and
// omitzero make it optional) and its jsonschema tag (the description); two
// tags of this package add what it does not read:
//
//	enum:"user,assistant"  the values the field takes
//	oneof:"string,null"    the JSON types the field takes
type components struct {
	types map[reflect.Type]bool
}

func newComponents() *components {
	return &components{types: map[reflect.Type]bool{}}
}

// ref adds t and every named struct type it reaches; it returns the $ref
// to t's schema.
func (c *components) ref(t reflect.Type) map[string]any {
	c.add(t)
	return map[string]any{"$ref": componentRef(elem(t).Name())}
}

func componentRef(name string) string { return "#/components/schemas/" + name }

// elem is the type a pointer, slice, array or map holds.
func elem(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	return t
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// component reports whether t gets a schema of its own: a named struct
// that encoding/json writes field by field (time.Time, say, is a string).
func component(t reflect.Type) bool {
	if t.Kind() != reflect.Struct || t.Name() == "" {
		return false
	}
	p := reflect.PointerTo(t)
	return !p.Implements(jsonMarshaler) && !p.Implements(textMarshaler)
}

func (c *components) add(t reflect.Type) {
	t = elem(t)
	if !component(t) || c.types[t] {
		return
	}
	c.types[t] = true
	for _, f := range reflect.VisibleFields(t) {
		// An embedded struct's fields are its container's (VisibleFields
		// lists them); it is a component only where it is named.
		if f.IsExported() && !f.Anonymous {
			c.add(f.Type)
		}
	}
}

// schemas infers the schema of every component.
func (c *components) schemas() (map[string]*jsonschema.Schema, error) {
	refs := map[reflect.Type]*jsonschema.Schema{}
	for t := range c.types {
		refs[t] = &jsonschema.Schema{Ref: componentRef(t.Name())}
	}
	out := map[string]*jsonschema.Schema{}
	owner := map[string]reflect.Type{}
	for t := range c.types {
		if o, dup := owner[t.Name()]; dup {
			return nil, fmt.Errorf("openapi: %s and %s are both named %s", o, t, t.Name())
		}
		owner[t.Name()] = t
		// t itself and the structs it embeds are inferred in place: a
		// $ref for them would be a cycle or, for an embedded struct, an
		// error (jsonschema-go merges an embedded struct's properties).
		others := make(map[reflect.Type]*jsonschema.Schema, len(refs))
		for k, v := range refs {
			others[k] = v
		}
		delete(others, t)
		for _, f := range reflect.VisibleFields(t) {
			if f.Anonymous {
				delete(others, elem(f.Type))
			}
		}
		s, err := jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: others})
		if err != nil {
			return nil, fmt.Errorf("openapi: %w", err)
		}
		if err := annotate(t, s); err != nil {
			return nil, err
		}
		out[t.Name()] = s
	}
	return out, nil
}

// annotate applies the enum and oneof tags of t's fields to its schema s,
// and states a pointer, slice or map field by what it holds: jsonschema-go
// also allows null for each, which encoding/json writes only for a nil
// one, and the wire never sends it where oneof does not say so.
func annotate(t reflect.Type, s *jsonschema.Schema) error {
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ps := s.Properties[name]
		if ps == nil {
			return fmt.Errorf("openapi: %s.%s has no schema", t, f.Name)
		}
		notNull(ps)
		if e, ok := f.Tag.Lookup("enum"); ok {
			for _, v := range strings.Split(e, ",") {
				ps.Enum = append(ps.Enum, v)
			}
		}
		if o, ok := f.Tag.Lookup("oneof"); ok {
			ps.Type, ps.Types = "", nil
			for _, typ := range strings.Split(o, ",") {
				ps.OneOf = append(ps.OneOf, &jsonschema.Schema{Type: typ})
			}
		}
	}
	return nil
}

// notNull drops the null jsonschema-go adds to a pointer's, slice's or
// map's type, here and in the items and values s holds; an unconstrained
// map value ({} or true) is left out, as it says nothing.
func notNull(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	switch {
	case len(s.Types) == 2 && s.Types[0] == "null":
		s.Type, s.Types = s.Types[1], nil
	case slices.Equal(s.Types, []string{"null"}) && s.Ref != "":
		s.Types = nil
	}
	notNull(s.Items)
	if ap := s.AdditionalProperties; ap != nil && reflect.ValueOf(*ap).IsZero() {
		s.AdditionalProperties = nil
	}
	notNull(s.AdditionalProperties)
}
