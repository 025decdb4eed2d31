// Package api holds the OpenAPI document of the Plant Store API, the
// contract the service is tested against. openapi.yaml is the source;
// openapi.json is generated from it (go generate ./api), and a test fails
// when the two differ.
package api

import _ "embed"

//go:generate go test -run TestJSONMatchesYAML -update .

// YAML is the OpenAPI document as written.
//
//go:embed openapi.yaml
var YAML []byte

// JSON is the same document as JSON.
//
//go:embed openapi.json
var JSON []byte
