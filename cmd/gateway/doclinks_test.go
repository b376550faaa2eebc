package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The documentation is README.md, CONTRIBUTING.md and docs/**/*.md, split
// into pages that link to each other's sections. TestDocLinks checks that
// every relative link between them names a file that exists and, for a
// Markdown file, a heading (or an explicit id) it has, so that moving a
// section cannot leave a link behind.

var (
	// mdLink finds inline links and images: [text](target "title").
	mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// htmlID finds explicit anchors: <a id="name"></a>, <span id=name>.
	htmlID = regexp.MustCompile(`\bid="?([A-Za-z0-9_-]+)"?`)
	// topicRE finds a topic: a paragraph that starts with its name in
	// bold, "**Leases.** …", after an optional anchor of its own.
	topicRE = regexp.MustCompile(`^(?:<a id="([A-Za-z0-9_-]+)"></a>)?\*\*([^*]+)\.\*\*`)
)

// topics returns the topics of a Markdown text, by name in lower case,
// each with its anchor ("" if it has none).
func topics(text string) map[string]string {
	out := map[string]string{}
	for _, line := range outsideCode(text) {
		if m := topicRE.FindStringSubmatch(line); m != nil {
			out[strings.ToLower(m[2])] = m[1]
		}
	}
	return out
}

// slug returns the anchor GitHub gives a heading: lower case, everything
// but letters, digits, spaces, hyphens and underscores dropped, spaces
// turned into hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// outsideCode returns the lines of a Markdown text, those of fenced blocks
// (and their fences) blank, and inline code spans blanked.
func outsideCode(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, line := range lines {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
			continue
		}
		parts := strings.Split(line, "`")
		for j := 1; j < len(parts); j += 2 {
			parts[j] = ""
		}
		lines[i] = strings.Join(parts, "``")
	}
	return lines
}

// anchors returns the anchors of a Markdown text: its headings' slugs
// (the second of two equal ones gets "-1", as on GitHub) and explicit ids.
func anchors(text string) []string {
	var out []string
	seen := map[string]int{}
	for _, line := range outsideCode(text) {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			s := slug(strings.ReplaceAll(h, "``", ""))
			if k := seen[s]; k > 0 {
				out = append(out, fmt.Sprintf("%s-%d", s, k))
			} else {
				out = append(out, s)
			}
			seen[s]++
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// brokenLinks returns a message for each relative link of the Markdown
// file rel (relative to root) that does not resolve.
func brokenLinks(root, rel string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	var broken []string
	for i, line := range outsideCode(string(data)) {
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			text, target := m[1], m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := filepath.Join(filepath.Dir(rel), file)
			if file == "" {
				path = rel
			}
			where := fmt.Sprintf("%s:%d: %s", rel, i+1, target)
			body, err := os.ReadFile(filepath.Join(root, path))
			if err != nil {
				if st, serr := os.Stat(filepath.Join(root, path)); serr == nil && st.IsDir() && frag == "" {
					continue
				}
				broken = append(broken, where+": no file "+path)
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				continue
			}
			if frag != "" && !slices.Contains(anchors(string(body)), frag) {
				broken = append(broken, where+": "+path+" has no heading #"+frag)
			}
			// A link named after a topic of the page lands on the topic,
			// not on the top of the section that holds it.
			if id, ok := topics(string(body))[strings.ToLower(text)]; ok && (id == "" || id != frag) {
				broken = append(broken, where+": "+path+" has the topic **"+text+".**: link to its anchor (give it one, <a id=\"…\"></a>, if it has none)")
			}
		}
	}
	return broken, nil
}

// TestDocLinks checks the relative links and anchors of README.md,
// CONTRIBUTING.md and docs/**/*.md.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files := append(docFiles(t, root), "CONTRIBUTING.md")
	links := 0
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		links += len(mdLink.FindAllString(string(data), -1))
		broken, err := brokenLinks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range broken {
			t.Error(b)
		}
	}
	if links < 20 {
		t.Errorf("found %d links in %v: is the link pattern still right?", links, files)
	}
}

// TestBrokenLinks checks the checker on pages made for it.
func TestBrokenLinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/a.md", "# A\n\n## Keys: what a counter is shared by\n\n## Verified callers (JWT)\n\n## Keys: what a counter is shared by\n\n<a id=\"leases\"></a>\n```sh\n## not a heading\n```\n\n## Redis\n\n<a id=\"batching\"></a>**Batching.** One round trip.\n\n**Deny cache.** No anchor.\n")
	write("docs/pic.png", "")
	tests := []struct {
		name, page string
		broken     int
	}{
		{"same page", "## Here\n\n[h](#here)", 0},
		{"anchors of another page", "[k](a.md#keys-what-a-counter-is-shared-by) [j](a.md#verified-callers-jwt) [k2](a.md#keys-what-a-counter-is-shared-by-1) [l](a.md#leases)", 0},
		{"other page", "[a](a.md) [k](a.md#keys-what-a-counter-is-shared-by) ![p](pic.png) [w](https://example.com/x#y)", 0},
		{"missing file", "[b](b.md)", 1},
		{"missing anchor", "[k](a.md#keys) [x](#nowhere)", 2},
		{"heading inside a code block", "[n](a.md#not-a-heading)", 1},
		{"path from the page's directory", "[p](docs/pic.png)", 1},
		{"inside code", "`[b](b.md)`\n```text\n[b](b.md)\n```", 0},
		{"a topic's anchor", "[Batching](a.md#batching) [the batches](a.md#redis)", 0},
		{"a topic by the section's top", "[Batching](a.md#redis)", 1},
		{"a topic without an anchor", "[Deny cache](a.md#redis)", 1},
	}
	for _, tt := range tests {
		write("docs/page.md", "# Page\n\n"+tt.page+"\n")
		got, err := brokenLinks(root, "docs/page.md")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tt.broken {
			t.Errorf("%s: brokenLinks: got %d %q, want %d", tt.name, len(got), got, tt.broken)
		}
	}
}
