package rlsconfig

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/safefile"
)

// DefaultMaxBytes is the default largest file Load reads.
const DefaultMaxBytes = config.DefaultMaxBytes

// Options tune Load. The zero value loads as envoyproxy/ratelimit does by
// default.
type Options struct {
	// MergeDomains lets several files declare the same domain, their
	// descriptors merged (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); by
	// default a domain declared twice is an error.
	MergeDomains bool
	// MaxBytes is the largest file read; 0 means DefaultMaxBytes.
	MaxBytes int64
}

// Load reads path, a file or a directory of files, into a Config. In a
// directory it reads every regular file (or symlink to one) whose name
// neither starts with "." nor ends with "~" (an editor's backup), whatever
// its extension, as envoyproxy/ratelimit
// reads its runtime directory; the "..data" and timestamped directories of
// a Kubernetes ConfigMap volume are skipped and its files, symlinks into
// "..data", are read. Every problem found is reported, as a config.Errors
// of "file:line: message".
func Load(path string, opt Options) (*Config, error) {
	files, err := listFiles(path)
	if err != nil {
		return nil, err
	}
	srcs := make([]source, 0, len(files))
	for _, f := range files {
		data, err := readFile(f, cmpOr(opt.MaxBytes, DefaultMaxBytes))
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, source{path: f, data: data})
	}
	return parse(srcs, opt)
}

func cmpOr(a, b int64) int64 {
	if a > 0 {
		return a
	}
	return b
}

// Parse reads one file's contents, named path in errors.
func Parse(path string, data []byte, opt Options) (*Config, error) {
	return parse([]source{{path: path, data: data}}, opt)
}

type source struct {
	path string
	data []byte
}

// listFiles returns path if it is a file, or the config files in it if
// it is a directory, sorted.
func listFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading rls config %s: %w", path, err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("reading rls config directory %s: %w", path, err)
	}
	var files []string
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") {
			continue // hidden, and editors' backups
		}
		p := filepath.Join(path, name)
		st, err := os.Stat(p) // follows symlinks
		if err != nil {
			return nil, fmt.Errorf("reading rls config %s: %w", p, err)
		}
		if st.Mode().IsRegular() {
			files = append(files, p)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("rls config directory %s holds no file (names starting with \".\" are skipped)", path)
	}
	slices.Sort(files)
	return files, nil
}

func readFile(path string, maxBytes int64) ([]byte, error) {
	data, err := safefile.Read(path, maxBytes)
	if errors.Is(err, safefile.ErrTooLarge) {
		return nil, fmt.Errorf("rls config %s: the file is larger than %d bytes (--max-rules-bytes)", path, maxBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("reading rls config %s: %w", path, err)
	}
	return data, nil
}

// Bounds on a config, so that a file cannot make the loader work without
// end, however its YAML aliases multiply what it writes.
const (
	// MaxDepth is the most levels of descriptors a domain may nest: no
	// request reaches deeper (rls.MaxEntries).
	MaxDepth = 32
	// MaxDescriptors is the most descriptors one load may hold.
	MaxDescriptors = 100_000
)

// parser collects the problems of one load.
type parser struct {
	file   string
	errs   config.Errors
	count  int                 // descriptors read
	active map[*yaml.Node]bool // descriptors lists being read
}

func (p *parser) errorf(line int, format string, args ...any) {
	p.errs = append(p.errs, &config.Error{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func parse(srcs []source, opt Options) (*Config, error) {
	c := &Config{Domains: map[string]*Domain{}}
	p := &parser{}
	sum := sha256.New()
	for _, s := range srcs {
		p.file = s.path
		fs := sha256.Sum256(s.data)
		c.Files = append(c.Files, File{Path: s.path, SHA256: hex.EncodeToString(fs[:])})
		fmt.Fprintf(sum, "%s\x00%x\x00", s.path, fs)
		p.file1(c, s.data, opt)
	}
	c.SHA256 = hex.EncodeToString(sum.Sum(nil))
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b *config.Error) int {
			if a.File != b.File {
				return strings.Compare(a.File, b.File)
			}
			return a.Line - b.Line
		})
		return nil, p.errs
	}
	return c, nil
}

// The keys of envoyproxy/ratelimit's format, and this gateway's
// extensions in rate_limit (docs/rls.md, "Extensions").
var (
	rootKeys       = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "value_to_metric", "share_threshold", "quota_mode"}
	rateLimitKeys  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces",
		"algorithm", "precision", "burst", "lock_seconds", "calendar", "timezone"}
)

// file1 reads one file's domain into c.
func (p *parser) file1(c *Config, data []byte, opt Options) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(0, "the file is empty: it needs a domain and its descriptors")
			return
		}
		p.errorf(yamlLine(err), "not valid YAML: %v", trimYAMLErr(err))
		return
	}
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		p.errorf(more.Line, "a second YAML document: put each domain in a file of its own")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root.Line, "the file must be a mapping with domain and descriptors")
		return
	}
	f := p.fields(root, rootKeys, "the top level")
	name := p.str(f["domain"])
	if name == "" {
		p.errorf(root.Line, "config file cannot have an empty domain: set domain")
		return
	}
	d, dup := c.Domains[name]
	switch {
	case dup && !opt.MergeDomains:
		p.errorf(f["domain"].Line, "duplicate domain %q: it is also declared in %s (one file per domain, or --merge-domains)", name, d.File)
		return
	case !dup:
		d = &Domain{Name: name, File: p.file}
		c.Domains[name] = d
	}
	p.descriptors(&d.node, f["descriptors"], "", true, 0)
}

// fields returns the values of mapping n by key, reporting keys not in
// known, and keys given twice. YAML aliases are followed and merge keys
// ("<<: *defaults") merged, as envoyproxy/ratelimit's YAML reader does; a
// key set in the mapping wins over a merged one.
func (p *parser) fields(n *yaml.Node, known []string, where string) map[string]*yaml.Node {
	return p.fieldsDepth(n, known, where, 0)
}

// maxMergeDepth bounds merges of merges, so that a mapping that merges
// itself is an error rather than an endless recursion.
const maxMergeDepth = 8

func (p *parser) fieldsDepth(n *yaml.Node, known []string, where string, depth int) map[string]*yaml.Node {
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			if v.Kind == yaml.SequenceNode {
				for _, m := range v.Content {
					merged = append(merged, deref(m))
				}
			} else {
				merged = append(merged, v)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			p.errorf(k.Line, "config error, key is not a string: %s", k.Value)
			continue
		}
		if !slices.Contains(known, k.Value) {
			p.errorf(k.Line, "config error, unknown key %q in %s (known: %s)", k.Value, where, strings.Join(known, ", "))
			continue
		}
		if _, dup := out[k.Value]; dup {
			p.errorf(k.Line, "%s is set twice", k.Value)
			continue
		}
		out[k.Value] = v
	}
	for _, m := range merged {
		if depth >= maxMergeDepth {
			p.errorf(m.Line, "merges (<<) nested more than %d deep, or a mapping that merges itself", maxMergeDepth)
			break
		}
		if m.Kind != yaml.MappingNode {
			p.errorf(m.Line, "a merge (<<) needs a mapping, not a %s", kindName(m))
			continue
		}
		for k, v := range p.fieldsDepth(m, known, where, depth+1) {
			if _, set := out[k]; !set {
				out[k] = v
			}
		}
	}
	return out
}

// deref follows a YAML alias (*name) to its anchored node.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// str returns scalar n's value; a non-scalar is reported.
func (p *parser) str(n *yaml.Node) string {
	if n == nil || n.Tag == "!!null" {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		p.errorf(n.Line, "want a string, not a %s", kindName(n))
		return ""
	}
	return n.Value
}

func (p *parser) boolean(n *yaml.Node, name string) bool {
	if n == nil || n.Tag == "!!null" {
		return false
	}
	b, err := strconv.ParseBool(n.Value)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || err != nil {
		p.errorf(n.Line, "%s %q is not true or false", name, n.Value)
	}
	return b
}

// integer returns n as a whole number in [lo, hi], reporting others.
func (p *parser) integer(n *yaml.Node, name string, lo, hi int64) (int64, bool) {
	if n == nil || n.Tag == "!!null" {
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil || v < lo || v > hi {
		p.errorf(n.Line, "%s %q is not a whole number in %d..%d", name, n.Value, lo, hi)
		return 0, false
	}
	return v, true
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "scalar"
}

// descriptors reads list n into parent.
func (p *parser) descriptors(parent *node, n *yaml.Node, path string, bounded bool, depth int) {
	if n == nil || n.Tag == "!!null" {
		return
	}
	switch {
	case depth >= MaxDepth:
		p.errorf(n.Line, "descriptors nested more than %d deep: no request can reach them", MaxDepth)
		return
	case p.active[n]:
		p.errorf(n.Line, "a descriptors list that contains itself (through a YAML alias)")
		return
	}
	if p.active == nil {
		p.active = map[*yaml.Node]bool{}
	}
	p.active[n] = true
	defer delete(p.active, n)
	if n.Kind != yaml.SequenceNode {
		p.errorf(n.Line, "descriptors must be a list of mappings, not a %s", kindName(n))
		return
	}
	for _, item := range n.Content {
		item = deref(item)
		if item.Kind != yaml.MappingNode {
			p.errorf(item.Line, "config error, descriptors contain a %s: each must be a mapping with key and rate_limit or descriptors", kindName(item))
			continue
		}
		p.descriptor(parent, item, path, bounded, depth)
	}
}

func (p *parser) descriptor(parent *node, n *yaml.Node, path string, bounded bool, depth int) {
	p.count++
	if p.count > MaxDescriptors {
		if p.count == MaxDescriptors+1 {
			p.errorf(n.Line, "more than %d descriptors (YAML aliases expanded): split the config", MaxDescriptors)
		}
		return
	}
	f := p.fields(n, descriptorKeys, "a descriptor")
	d := &Descriptor{
		Key: p.str(f["key"]), Value: p.str(f["value"]), File: p.file, Line: n.Line,
		ShadowMode:     p.boolean(f["shadow_mode"], "shadow_mode"),
		DetailedMetric: p.boolean(f["detailed_metric"], "detailed_metric"),
		ValueToMetric:  p.boolean(f["value_to_metric"], "value_to_metric"),
		ShareThreshold: p.boolean(f["share_threshold"], "share_threshold"),
		QuotaMode:      p.boolean(f["quota_mode"], "quota_mode"),
	}
	if d.Key == "" {
		p.errorf(n.Line, "descriptor has an empty key: set key")
		return
	}
	d.Bounded = bounded && d.Value != "" && (!d.wildcard() || d.ShareThreshold)
	d.Path = path + d.Key
	if d.Value != "" {
		d.Path += "_" + d.Value
	}
	if d.ShareThreshold && !d.wildcard() {
		p.errorf(f["share_threshold"].Line, "share_threshold can only be used with wildcard values (ending with '*'), but %s has value %q", d.Key, d.Value)
	}
	k := entry{d.Key, d.Value}
	if prev, dup := parent.exact[k]; dup {
		p.errorf(n.Line, "duplicate descriptor composite key %q (also on line %d)", d.Path, prev.Line)
		return
	}
	if rl := f["rate_limit"]; rl != nil {
		d.Limit = p.rateLimit(rl, d)
	}
	if parent.exact == nil {
		parent.exact = map[entry]*Descriptor{}
	}
	parent.exact[k] = d
	if d.wildcard() {
		parent.wildcards = append(parent.wildcards, d)
	}
	parent.list = append(parent.list, d)
	p.descriptors(&d.node, f["descriptors"], d.Path+".", d.Bounded, depth+1)
}

// rateLimit reads a rate_limit mapping.
func (p *parser) rateLimit(n *yaml.Node, d *Descriptor) *Limit {
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "rate_limit must be a mapping with unit and requests_per_unit, not a %s", kindName(n))
		return nil
	}
	f := p.fields(n, rateLimitKeys, "rate_limit")
	l := &Limit{Name: p.str(f["name"]), Unlimited: p.boolean(f["unlimited"], "unlimited")}
	if r := f["replaces"]; r != nil && r.Tag != "!!null" {
		if r.Kind != yaml.SequenceNode {
			p.errorf(r.Line, "replaces must be a list of mappings with a name")
		} else {
			for _, item := range r.Content {
				item = deref(item)
				var name string
				if item.Kind == yaml.MappingNode {
					rf := p.fields(item, []string{"name"}, "replaces")
					name = p.str(rf["name"])
				}
				switch {
				case name == "":
					p.errorf(item.Line, "should not have an empty replaces entry: each is a mapping with a name")
				case name == l.Name:
					p.errorf(item.Line, "replaces should not contain the name of its own limit (%s)", name)
				default:
					l.Replaces = append(l.Replaces, name)
				}
			}
		}
	}
	unitName := strings.ToLower(p.str(f["unit"]))
	u, knownUnit := units[unitName]
	if l.Unlimited {
		if knownUnit {
			p.errorf(f["unit"].Line, "should not specify rate limit unit when unlimited")
		}
		for _, ext := range []string{"algorithm", "precision", "burst", "lock_seconds", "calendar", "timezone"} {
			if f[ext] != nil {
				p.errorf(f[ext].Line, "%s does not apply to an unlimited limit", ext)
			}
		}
		return l
	}
	if !knownUnit {
		line := n.Line
		if f["unit"] != nil {
			line = f["unit"].Line
		}
		p.errorf(line, "invalid rate limit unit %q: use second, minute, hour, day, week, month or year", unitName)
		return nil
	}
	rpu, _ := p.integer(f["requests_per_unit"], "requests_per_unit", 0, math.MaxUint32)
	l.RequestsPerUnit, l.Unit = uint32(rpu), u.unit
	if rpu > limit.MaxLimit {
		p.errorf(f["requests_per_unit"].Line, "requests_per_unit %d is above the largest limit this gateway counts, %d", rpu, int64(limit.MaxLimit))
		return nil
	}
	params := limit.Params{Algorithm: cmpStr(p.str(f["algorithm"]), limit.DefaultAlgorithm), Limit: rpu, Window: u.d}
	if params.Algorithm == "sliding_window" {
		params.Precision = limit.DefaultPrecision
	}
	if v, ok := p.integer(f["precision"], "precision", 1, limit.MaxPrecision); ok {
		params.Precision = int(v)
	}
	if v, ok := p.integer(f["burst"], "burst", 1, limit.MaxLimit); ok {
		params.Burst = v
	}
	if v, ok := p.integer(f["lock_seconds"], "lock_seconds", 0, 100*365*24*3600); ok {
		params.Lock = time.Duration(v) * time.Second
	}
	if p.boolean(f["calendar"], "calendar") {
		if u.cal == "" {
			p.errorf(f["calendar"].Line, "calendar applies to the units day, week and month, not %s", unitName)
			return nil
		}
		params.Calendar = u.cal
		if f["algorithm"] == nil {
			params.Algorithm, params.Precision = limit.CalendarAlgorithm, 0
		}
	}
	params.Zone = p.str(f["timezone"])
	if err := params.Validate(); err != nil {
		line := n.Line
		var se *limit.SettingError
		if errors.As(err, &se) {
			if v := f[settingKey(se.Setting)]; v != nil {
				line = v.Line
			}
		}
		p.errorf(line, "rate_limit of %s: %v", d.Path, err)
		return nil
	}
	l.Params = params
	return l
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// settingKey maps a limit.SettingError's setting to the key of this
// format that sets it.
func settingKey(s string) string {
	switch s {
	case "limit":
		return "requests_per_unit"
	case "lockSeconds":
		return "lock_seconds"
	}
	return s
}

// yamlLine returns the line of a yaml.v3 error, 0 if it names none.
func yamlLine(err error) int {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	if i := strings.Index(msg, "line "); i >= 0 {
		rest := msg[i+5:]
		j := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
		if j < 0 {
			j = len(rest)
		}
		if n, err := strconv.Atoi(rest[:j]); err == nil {
			return n
		}
	}
	return 0
}

// trimYAMLErr drops the "yaml: line N: " prefix, which the error's own
// file:line already says.
func trimYAMLErr(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if strings.HasPrefix(msg, "line ") {
		if i := strings.Index(msg, ": "); i >= 0 {
			return msg[i+2:]
		}
	}
	return msg
}
