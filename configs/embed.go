// Package configs holds the shipped rule file, built into the binary so
// that `gateway serve` starts anywhere.
//
// It holds the file only: it must not hold defaults or code of its own; the
// shipped rules are read through package config like any other rule file.
package configs

import _ "embed"

// ExampleRules is configs/ratelimiter-rule.yaml: the production-safe
// rules (unknown callers limited per client address, no apps), not the
// demo rules of configs/demo-rules.yaml.
//
//go:embed ratelimiter-rule.yaml
var ExampleRules []byte
