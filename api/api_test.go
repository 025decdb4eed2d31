package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"testing"

	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite openapi.json from openapi.yaml")

func TestJSONMatchesYAML(t *testing.T) {
	want, err := yamlToJSON(YAML)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("openapi.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(JSON, want) {
		t.Fatal("openapi.json is out of date with openapi.yaml: run go generate ./api")
	}
	if !json.Valid(JSON) {
		t.Fatal("openapi.json is not valid JSON")
	}
}

// yamlToJSON converts a YAML document to indented JSON, keeping the order
// of mapping keys so the JSON reads like the YAML.
func yamlToJSON(src []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeNode(&buf, doc.Content[0]); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, buf.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func writeNode(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.AliasNode:
		return writeNode(buf, n.Alias)
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i < len(n.Content); i += 2 {
			if i > 0 {
				buf.WriteByte(',')
			}
			key, _ := json.Marshal(n.Content[i].Value)
			buf.Write(key)
			buf.WriteByte(':')
			if err := writeNode(buf, n.Content[i+1]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeNode(buf, c); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!int", "!!float":
			if !json.Valid([]byte(n.Value)) {
				return fmt.Errorf("line %d: number %q has no JSON form", n.Line, n.Value)
			}
			buf.WriteString(n.Value)
		case "!!bool":
			b, err := strconv.ParseBool(n.Value)
			if err != nil {
				return fmt.Errorf("line %d: %w", n.Line, err)
			}
			buf.WriteString(strconv.FormatBool(b))
		case "!!null":
			buf.WriteString("null")
		default:
			s, _ := json.Marshal(n.Value)
			buf.Write(s)
		}
	default:
		return fmt.Errorf("line %d: unexpected YAML node kind %d", n.Line, n.Kind)
	}
	return nil
}

// JavaScript reads JSON numbers as doubles, so an integer beyond 2^53 is
// shown rounded by tools such as the reference page: the int64 bounds
// came out as ±9223372036854776000, which the server refuses. Such
// ranges are stated by format: int64 and in words instead.
func TestNumbersExactInJavaScript(t *testing.T) {
	dec := json.NewDecoder(bytes.NewReader(JSON))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(path+"/"+k, e)
			}
		case []any:
			for i, e := range v {
				walk(path+"/"+strconv.Itoa(i), e)
			}
		case json.Number:
			f, err := strconv.ParseFloat(v.String(), 64)
			if err != nil || math.Abs(f) > 1<<53 {
				t.Errorf("%s: %s is beyond what JavaScript reads exactly", path, v)
			}
		}
	}
	walk("", doc)
}
