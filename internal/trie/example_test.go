package trie_test

import (
	"fmt"

	"github.com/ratelimit-gateway/gateway/internal/trie"
)

func Example() {
	rules := trie.New[int](trie.Options{})
	for _, r := range []struct {
		api     string
		methods []string
		limit   int
	}{
		{"/v1/user", nil, 100},
		{"/v1/user/{id}/orders", []string{"GET"}, 10},
		{"/v1/order", nil, 50},
	} {
		if err := rules.Insert(r.api, r.methods, r.limit); err != nil {
			fmt.Println(err)
			return
		}
	}

	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/user/42/orders"},
		{"POST", "/v1/user/42/orders"},
		{"GET", "/v1//user/./7;jsessionid=x"},
		{"GET", "/v1/username"},
		{"GET", "/v1/user/%2e%2e/order"},
		{"GET", "/v1/user%2F42"},
	} {
		path, err := trie.Normalize(req.path)
		if err != nil {
			fmt.Printf("%s %s: 400 %v\n", req.method, req.path, err)
			continue
		}
		limit, api, ok := rules.Match(req.method, path)
		if !ok {
			fmt.Printf("%s %s: no rule\n", req.method, path)
			continue
		}
		fmt.Printf("%s %s: %s limit %d\n", req.method, path, api, limit)
	}
	// Output:
	// GET /v1/user/42/orders: /v1/user/{id}/orders limit 10
	// POST /v1/user/42/orders: /v1/user limit 100
	// GET /v1/user/7: /v1/user limit 100
	// GET /v1/username: no rule
	// GET /v1/order: /v1/order limit 50
	// GET /v1/user%2F42: 400 path has an encoded slash (%2F)
}

func ExampleTrie_Explain() {
	rules := trie.New[string](trie.Options{})
	_ = rules.Insert("/v1/user", nil, "a")
	_ = rules.Insert("/v1/{kind}/orders", nil, "b")
	_ = rules.Insert("/v1/user/orders", []string{"POST"}, "c")

	for _, c := range rules.Explain("GET", "/v1/user/orders") {
		fmt.Printf("%-5v %s: %s\n", c.Chosen, c.Pattern, c.Reason)
	}
	// Output:
	// false /v1/user/orders: method GET not in [POST]
	// true  /v1/{kind}/orders: matches 3 of 3 segments; beats "/v1/user": 3 matching segments beat 2
	// false /v1/user: matches 2 of 3 segments; "/v1/{kind}/orders" wins: 3 matching segments beat 2
}
