// Package trie normalizes request paths and finds the most specific rule for
// a path in a segment-level prefix trie (steps 2 and 3, "Path" and "Match",
// of docs/rules.md, "How a request is handled"). A trie, because rule URLs
// share long prefixes and are matched by prefix.
//
// A rule pattern such as "/v1/user/{id}/orders" matches every path whose
// first segments match it: literals exactly (or ignoring ASCII case), a
// {name} variable any one non-empty segment. Among the rules that match, the
// one matching the most segments wins; at equal depth a literal beats a
// variable at the first position where they differ; then a rule that lists
// the request method beats one that applies to every method.
//
// The package knows nothing about limits: a rule's value is whatever the
// caller stores in it.
package trie
