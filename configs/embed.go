// Package configs holds the example rule file, built into the binary so
// that `gateway serve` starts anywhere.
package configs

import _ "embed"

// ExampleRules is configs/ratelimiter-rule.yaml.
//
//go:embed ratelimiter-rule.yaml
var ExampleRules []byte
