package convapi

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

// Types that exercise each rule of components, apart from the wire types
// (whose schemas TestOpenAPIMatchesTheWire checks against real traffic).
type (
	schemaInner struct {
		N int `json:"n"`
	}
	SchemaEmbedded struct {
		Role string `json:"role" enum:"a,b"`
		Note string `json:"note,omitempty" jsonschema:"one, two"`
	}
	schemaOuter struct {
		SchemaEmbedded
		Inner  *schemaInner            `json:"inner,omitempty"`
		List   []schemaInner           `json:"list"`
		ByName map[string]*schemaInner `json:"by_name"`
		Map    map[string]any          `json:"map"`
		Maybe  *string                 `json:"maybe" oneof:"string,null"`
		Count  uint64                  `json:"count"`
		Any    any                     `json:"any,omitzero" oneof:"boolean,integer"`
		Free   any                     `json:"free"`
		hidden int
		Skip   int `json:"-"`
	}
)

func TestOpenAPIComponents(t *testing.T) {
	_ = schemaOuter{}.hidden
	for _, tc := range []struct {
		name string
		want string
	}{
		// The embedded struct's fields are merged in place, with their
		// tags; every named struct is a $ref; pointers, slices and maps
		// are not nullable unless oneof says so.
		{"schemaOuter", `{"type":"object","additionalProperties":false,
			"required":["role","list","by_name","map","maybe","count","free"],
			"properties":{
				"role":{"type":"string","enum":["a","b"]},
				"note":{"type":"string","description":"one, two"},
				"inner":{"$ref":"#/components/schemas/schemaInner"},
				"list":{"type":"array","items":{"$ref":"#/components/schemas/schemaInner"}},
				"by_name":{"type":"object","additionalProperties":{"$ref":"#/components/schemas/schemaInner"}},
				"map":{"type":"object"},
				"maybe":{"oneOf":[{"type":"string"},{"type":"null"}]},
				"count":{"type":"integer","minimum":0},
				"any":{"oneOf":[{"type":"boolean"},{"type":"integer"}]},
				"free":true}}`},
		{"schemaInner", `{"type":"object","additionalProperties":false,"required":["n"],"properties":{"n":{"type":"integer"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newComponents()
			if got := c.ref(reflect.TypeFor[[]*schemaOuter]()); got["$ref"] != "#/components/schemas/schemaOuter" {
				t.Fatalf("ref = %v", got)
			}
			schemas, err := c.schemas()
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for n := range schemas {
				names = append(names, n)
			}
			slices.Sort(names)
			if !slices.Equal(names, []string{"schemaInner", "schemaOuter"}) {
				t.Errorf("components %v, want schemaInner and schemaOuter (an embedded struct is not one)", names)
			}
			b, err := json.Marshal(schemas[tc.name])
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("schema\n%s\nwant\n%s", b, tc.want)
			}
		})
	}
}

// A type jsonschema-go cannot describe is an error of the document, not
// a panic or a schema that says nothing.
func TestOpenAPIComponentsError(t *testing.T) {
	type withChan struct {
		C chan int `json:"c"`
	}
	c := newComponents()
	c.ref(reflect.TypeFor[withChan]())
	if _, err := c.schemas(); err == nil {
		t.Fatal("a chan field gave no error")
	}
}
