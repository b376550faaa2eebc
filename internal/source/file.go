package source

import (
	"context"
	"log/slog"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/watch"
)

// File is the rules in a file, watched with package watch (docs/sources.md,
// "Reloading rules").
type File struct {
	path     string
	maxBytes int64
	log      *slog.Logger
	since    time.Time
}

var _ Source = (*File)(nil)

// NewFile returns the source of the rule file at path, read up to
// maxBytes.
func NewFile(path string, maxBytes int64, log *slog.Logger) *File {
	return &File{path: path, maxBytes: maxBytes, log: log, since: time.Now()}
}

// Load reads the file with config.LoadMax; the version is its sha256.
func (f *File) Load(context.Context) (*config.Rules, string, error) {
	r, err := config.LoadMax(f.path, f.maxBytes)
	if err != nil {
		return nil, "", err
	}
	return r, r.SHA256, nil
}

// Watch calls onChange after each burst of changes to the file until ctx
// is done.
func (f *File) Watch(ctx context.Context, onChange func()) error {
	w, err := watch.New(watch.Config{Path: f.path, OnChange: onChange, Logger: f.log.With("watching", "rule file")})
	if err != nil {
		return err
	}
	defer w.Close()
	w.Run(ctx)
	return nil
}

// Status reports a file as always connected.
func (f *File) Status() Status { return Status{Source: f.path, Connected: true, Since: f.since} }

// String returns the path.
func (f *File) String() string { return f.path }

// Close does nothing.
func (f *File) Close() error { return nil }
