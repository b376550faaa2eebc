// Package configs holds the shipped rule file, built into the binary so
// that `gateway serve` starts anywhere.
package configs

import _ "embed"

// ExampleRules is configs/ratelimiter-rule.yaml: the production-safe
// rules (unknown callers limited per client address, no apps), not the
// demo rules of configs/demo-rules.yaml.
//
//go:embed ratelimiter-rule.yaml
var ExampleRules []byte
