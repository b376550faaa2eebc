package trie

import (
	"fmt"
	"testing"
)

// benchTrie builds a trie of 10,000 rules shaped like a large rule file:
// 5 API versions × 100 resources × 20 rules per resource, mixing literals,
// variables and method restrictions.
func benchTrie(b *testing.B, ci bool) *Trie[int] {
	b.Helper()
	tr := New[int](Options{CaseInsensitive: ci})
	add := func(pattern string, methods ...string) {
		if err := tr.Insert(pattern, methods, tr.Len()); err != nil {
			b.Fatal(err)
		}
	}
	for v := 1; v <= 5; v++ {
		for i := range 100 {
			base := fmt.Sprintf("/v%d/resource%d", v, i)
			add(base)
			add(base, "POST")
			add(base+"/{id}", "GET")
			add(base + "/{id}")
			add(base + "/search")
			for j := range 15 {
				if j%3 == 0 {
					add(fmt.Sprintf("%s/{id}/sub%d", base, j), "GET", "HEAD")
				} else {
					add(fmt.Sprintf("%s/{id}/sub%d", base, j))
				}
			}
		}
	}
	if tr.Len() != 10000 {
		b.Fatalf("Len: got %d, want 10000", tr.Len())
	}
	return tr
}

var benchRequests = []struct{ method, path string }{
	{"GET", "/v3/resource42/12345/sub7"},       // deep, through a variable
	{"GET", "/v1/resource7/search/sub3"},       // literal dead-ends, backtracks to {id}
	{"GET", "/v5/resource99/abc"},              // variable with a method
	{"POST", "/v2/resource10"},                 // method beats any
	{"DELETE", "/v4/resource3/777/sub9/x/y/z"}, // method mismatch falls back
	{"GET", "/v9/unknown/x"},                   // no match
	{"GET", "/v1/resource1/search"},            // literal beats variable
	{"PUT", "/v2/resource50/1/sub14/"},         // trailing slash
}

func benchmarkMatch(b *testing.B, ci bool, upper bool) {
	tr := benchTrie(b, ci)
	reqs := benchRequests
	if upper {
		reqs = append([]struct{ method, path string }(nil), reqs...)
		for i := range reqs {
			reqs[i].path = "/V" + reqs[i].path[2:]
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r := reqs[i%len(reqs)]
			tr.Match(r.method, r.path)
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				r := reqs[i%len(reqs)]
				tr.Match(r.method, r.path)
				i++
			}
		})
	})
}

func BenchmarkMatch(b *testing.B) { benchmarkMatch(b, false, false) }

func BenchmarkMatchCaseInsensitive(b *testing.B) { benchmarkMatch(b, true, true) }

func BenchmarkNormalize(b *testing.B) {
	for _, bc := range []struct{ name, path string }{
		{"clean", "/v1/user/42/orders/"},
		{"dirty", "/v1//user/./42/%2e%2e/43/orders;jsessionid=abc/%41%62"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Normalize(bc.path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
