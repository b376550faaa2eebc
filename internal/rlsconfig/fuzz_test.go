package rlsconfig

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds Parse arbitrary files: it must never panic, and a
// config it accepts must answer Find.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(upstream + "*.yaml")
	for _, p := range files {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.yaml", data, Options{})
		if err != nil {
			return
		}
		for _, d := range c.Domains {
			d.Walk(func(desc *Descriptor) {
				d.Find([]Entry{{desc.Key, desc.Value}})
			})
		}
	})
}
